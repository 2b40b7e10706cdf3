"""``EagerDispatchMode``: a ``TorchDispatchMode`` whose ``__torch_dispatch__`` torch leaves alone.

torch wraps the ``__torch_dispatch__`` of every ``TorchDispatchMode`` subclass in
``torch._disable_dynamo`` unless the class says not to (``_should_skip_dynamo``). The wrapper's
first call imports ``torch._dynamo``: about 860 modules (sympy among them), 2 s on the course's
2-core machines, in every process that enters such a mode for the first time, and so in every
forked check worker whose parent never did. The course's modes record or refuse operators of
eager code, which is never compiled, so the wrapper protects nothing there.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class EagerDispatchMode(TorchDispatchMode):
    """A ``TorchDispatchMode`` for eager code (see the module docstring): subclass it and
    define ``__torch_dispatch__`` as usual."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
