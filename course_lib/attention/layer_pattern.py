r"""Which layers are local, global, linear or without positions: the layer patterns of today's
open models, in transformers' names (``config.layer_types``).

.. math:: \mathrm{kind}(i) = \text{global if } (i + 1) \bmod n = 0 \text{ else local}
          \quad (i = 0 \dots N-1)

Gemma 3: ``n = 6`` (five sliding-window layers, then one global); gpt-oss: ``n = 2`` (sliding
and full alternate); Qwen3-Next: ``n = 4`` with Gated DeltaNet layers as the "local" ones
(``"linear_attention"``). Without positions (NoPE): every ``n``-th layer of SmolLM3 and Llama 4
has no RoPE (``n = 4``). A sliding layer's queries see the last ``window`` keys (themselves
included), a full layer's all earlier keys.
"""

from __future__ import annotations

import torch

from .masks import causal_mask, sliding_window_mask

#: the kinds of layer, as transformers' ``config.layer_types`` spells them
KINDS = ("full_attention", "sliding_attention", "linear_attention")


def interleaved(num_layers: int, every: int, local: str = "sliding_attention",
                global_: str = "full_attention") -> list[str]:
    """``num_layers`` kinds: ``global_`` at layers ``every−1, 2·every−1, …``, ``local``
    elsewhere (``every = 1``: all global)."""
    if not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"num_layers must be an int >= 0, got {num_layers!r}")
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be an int >= 1, got {every!r}")
    for name, kind in (("local", local), ("global_", global_)):
        if kind not in KINDS:
            raise ValueError(f"{name} must be one of {KINDS}, got {kind!r}")
    return [global_ if (i + 1) % every == 0 else local for i in range(num_layers)]


def rope_layers(num_layers: int, nope_every: int | None) -> list[bool]:
    """``num_layers`` flags, True where the layer applies RoPE: every ``nope_every``-th layer
    (``nope_every−1, 2·nope_every−1, …``) has no positions; ``None``: RoPE everywhere."""
    if nope_every is None:
        nope_every = num_layers + 1                    # no layer is a multiple of it
    interleaved(num_layers, nope_every)                # validates both
    return [(i + 1) % nope_every != 0 for i in range(num_layers)]


def layer_mask(kind: str, L: int, window: int | None = None,
               device: torch.device | str | None = None) -> torch.Tensor:
    """``(L, L)`` bool (True = may attend) for a layer of ``kind`` over ``L`` tokens: causal for
    ``"full_attention"``, the last ``window`` keys for ``"sliding_attention"``."""
    if kind == "full_attention":
        return causal_mask(L, device=device)
    if kind == "sliding_attention":
        if window is None:
            raise ValueError("a sliding_attention layer needs a window (an int >= 1)")
        return sliding_window_mask(L, window=window, device=device)
    raise ValueError(f"layer_mask builds masks for 'full_attention' and 'sliding_attention', "
                     f"got {kind!r} (a linear_attention layer has no mask)")


def pattern_string(kinds: list[str]) -> str:
    """One letter per layer: ``G`` full (global), ``L`` sliding (local), ``D`` linear
    (DeltaNet), e.g. Gemma 3's ``"LLLLLG…"``."""
    letters = {"full_attention": "G", "sliding_attention": "L", "linear_attention": "D"}
    try:
        return "".join(letters[k] for k in kinds)
    except KeyError as err:
        raise ValueError(f"unknown layer kind {err.args[0]!r}: one of {KINDS}") from None


__all__ = ["KINDS", "interleaved", "layer_mask", "pattern_string", "rope_layers"]
