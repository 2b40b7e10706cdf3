"""The data an exercise is declared with: :class:`Exercise`, :class:`Case`, :class:`Mistake`.

An exercise is *data*: the generic engine (``_engine.py``) runs every declaration the same way.
Nothing in here runs learner code.
"""

from __future__ import annotations

import inspect
import itertools
import textwrap
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from ._probes import Probe

#: Default ``(atol, rtol)`` per floating dtype; learner outputs must match the oracle within them.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-8, 1e-6),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 1e-2),
    torch.bfloat16: (2e-2, 5e-2),
}

#: Groups of forbidden operations. Each names its aten operators by family (``aten_family``, a
#: pattern matched against every registered operator's name, so that a new torch release's new
#: variant is in it: ``tests/test_forbidden_families.py`` reviews the list), plus ``aten`` names
#: and minus ``aten_not`` ones; torch API function names (caught by a torch-function mode, before
#: composite ops decompose, for a precise message) and ``module:qualified.name`` Python functions
#: (caught by code object, however they were imported). In a check's worker every operator of the
#: family gets a refusing kernel (``_policy``): no torch mode can be switched off to reach it.
FORBIDDEN_GROUPS: dict[str, dict[str, Any]] = {
    "softmax": {
        "label": "torch's softmax / log_softmax / logsumexp",
        "aten_family": r"softmax|logsumexp",
        "aten": (),
        "torch": ("softmax", "log_softmax", "special_softmax", "special_log_softmax",
                  "_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax",
                  "logsumexp", "special_logsumexp"),
        "python": ("course_lib.attention.softmax:safe_softmax",),
    },
    "matmul": {
        "label": "torch's matrix products (@, matmul, mm, bmm, einsum, ...)",
        "aten_family": (r"(^|_)(mm|bmm|addmm|addbmm|baddbmm|matmul|dot|vdot|mv|addmv|smm|hspmm|"
                        r"sspaddmm|linear|bilinear|trilinear|einsum|tensordot|inner|outer|ger|"
                        r"kron|multi_dot|vecdot|gemm|gemv|\w*convolution\w*|"
                        r"conv(\d|_tbc|_transpose|_depthwise|_dilated)\w*)(_|$)|"
                        r"^_?(mkldnn|fbgemm|_wrapped)_\w*linear|(^|_)int\d*(pack)?_?mm"),
        "aten": ("_scaled_mm", "_scaled_mm_v2", "_int_mm", "_grouped_mm", "_scaled_grouped_mm",
                 "_scaled_grouped_mm_v2", "_dyn_quant_matmul_4bit"),
        "aten_not": ("_compute_linear_combination", "upsample_linear1d",
                     "upsample_linear1d_backward", "upsample_bilinear2d",
                     "upsample_bilinear2d_backward", "_upsample_bilinear2d_aa",
                     "_upsample_bilinear2d_aa_backward", "upsample_trilinear3d",
                     "upsample_trilinear3d_backward"),
        "torch": ("matmul", "mm", "bmm", "einsum", "tensordot", "linear", "addmm", "baddbmm"),
        "python": (),
    },
    "sdpa": {
        "label": "torch's scaled_dot_product_attention (or course_lib's attention implementations)",
        "aten_family": r"attention|_fused_sdp|multi_head|transformer_encoder",
        "aten": (),
        "torch": ("scaled_dot_product_attention", "multi_head_attention_forward"),
        "python": ("course_lib.attention.reference:scaled_dot_product_attention",
                   "course_lib.attention.reference:attention_weights",
                   "course_lib.attention.flash:scaled_dot_product_attention",
                   "course_lib.attention.sdpa:scaled_dot_product_attention"),
    },
    "mha": {
        "label": "a ready-made multi-head attention module (torch.nn.MultiheadAttention, "
                 "course_lib's MultiHeadAttention)",
        "aten_family": r"multi_head|transformer_encoder",
        "aten": (),
        "torch": ("multi_head_attention_forward",),
        "python": ("torch.nn.modules.activation:MultiheadAttention.forward",
                   "torch.nn.functional:multi_head_attention_forward",
                   "course_lib.attention.multihead:MultiHeadAttention.forward"),
    },
    "transformer_block": {
        "label": "a ready-made transformer block (course_lib's TransformerBlock, "
                 "torch.nn.TransformerEncoderLayer / TransformerDecoderLayer)",
        "aten_family": r"transformer_encoder",
        "aten": (),
        "torch": (),
        "python": ("course_lib.attention.multihead:TransformerBlock.forward",
                   "torch.nn.modules.transformer:TransformerEncoderLayer.forward",
                   "torch.nn.modules.transformer:TransformerDecoderLayer.forward"),
    },
    "autograd": {
        "label": "torch's automatic differentiation (torch.autograd.grad, Tensor.backward, "
                 "torch.func's transforms)",
        "aten_family": "",
        "aten": (),
        "torch": (),
        "python": ("torch.autograd:grad", "torch.autograd:backward",
                   "torch._tensor:Tensor.backward",
                   *(f"torch.autograd.functional:{f}" for f in (
                       "vjp", "jvp", "jacobian", "hessian", "hvp", "vhp")),
                   *(f"torch.func:{f}" for f in (
                       "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
                       "linearize"))),
    },
}


def attention_modules(packages: tuple[str, ...] = ("nn", "ao/nn")) -> tuple[str, ...]:
    """``module:Class.method`` of every forward method (``forward``, ``_forward_impl``, ...) of
    every attention module class (``class *Attention*(...)``, a ``torch.nn.Module``) defined
    in torch's ``packages``: found by reading the packages' sources, so that a module torch adds
    (``torch.ao.nn.quantizable.MultiheadAttention``...) is forbidden without anyone naming it."""
    import importlib
    import re
    from pathlib import Path

    root = Path(torch.__file__).parent
    pattern = re.compile(r"^class (\w*Attention\w*)\(", re.M)
    found: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for m in pattern.finditer(text):
                module = ".".join(("torch", *path.relative_to(root).with_suffix("").parts))
                try:
                    cls = getattr(importlib.import_module(module), m.group(1))
                except Exception:    # a module this build cannot import: nothing to call
                    continue
                if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
                    found += [f"{module}:{cls.__qualname__}.{name}"
                              for name, fn in vars(cls).items()
                              if "forward" in name and inspect.isfunction(fn)]
    return tuple(found)


_ATTENTION_MODULES = attention_modules()
FORBIDDEN_GROUPS["sdpa"]["python"] += _ATTENTION_MODULES
FORBIDDEN_GROUPS["mha"]["python"] = tuple(dict.fromkeys(
    FORBIDDEN_GROUPS["mha"]["python"] + _ATTENTION_MODULES))
FORBIDDEN_GROUPS["mha"]["label"] = (
    "a ready-made multi-head attention module (torch.nn.MultiheadAttention, any attention "
    "module of torch.nn or torch.ao, course_lib's MultiHeadAttention)")


class OnceIterator:
    """A case argument that reaches the learner as a fresh one-pass iterator over ``items``.

    ``hold``: a *stream* the learner may not keep: when block ``i`` is handed out, blocks
    ``0 .. i - hold`` must be gone (no reference left: ``list(blocks)``, ``torch.cat`` of them,
    a list of blocks all keep them). A block kept is noted in :data:`HELD_BLOCKS`, which the
    exercise's extension turns into its verdict (in a watched call). Its blocks are copied one at
    a time as they are handed out, and not watched for changes in place."""

    def __init__(self, items: Sequence[Any], hold: int | None = None) -> None:
        self.items = list(items)
        self.hold = hold


#: ``(block handed out, earliest block still held)`` for every stream block a learner kept, in
#: this process (see :class:`OnceIterator`); an extension clears it before each call.
HELD_BLOCKS: list[tuple[int, int]] = []


@dataclass
class Case:
    """One generated input: positional ``args`` for the learner's function.

    ``name`` is shown to the learner when this case fails; ``note`` says what is special about it
    (e.g. "rows 1 and 3 fully masked"). ``max_square`` (``N``) makes the engine reject any
    freshly allocated tensor with two dims of size ``>= N`` (an N×N tensor).
    """

    name: str
    args: tuple[Any, ...]
    note: str = ""
    max_square: int | None = None


@dataclass
class Mistake:
    """A known misconception: ``fn`` is a buggy implementation whose outputs identify it.

    ``message`` names the misconception and says how to fix it; it is shown verbatim.
    ``tolerance``: per-dtype ``(atol, rtol)`` within which a learner's output matches this
    mistake's; by default twice the exercise's own. Set it for a mistake that *is* rounding
    (float32 arithmetic on a float64 input): two float32 computations of the same formula
    differ by as much as either differs from the right answer.
    ``family``: the id a check reports, when several declared mistakes are variants of one
    misconception (the same bug simulated at each block size a learner's kernel may use): which
    variant matches a learner's output by a hair may change with the seed, the diagnosis must not.
    """

    id: str
    message: str
    fn: Callable[..., Any]
    tolerance: Callable[[torch.dtype], tuple[float, float]] | None = None
    family: str | None = None

    @property
    def reported_id(self) -> str:
        """The id a failed check reports: the family's, else the mistake's own."""
        return self.family or self.id


class CallExtension:
    """A chapter's own check of each call, plugged into the engine (``Exercise.extension``).

    :meth:`around_call` is entered around every call of the learner's function where the
    learner's code is watched (the check's worker, or in-process with the watch; never on the
    bare path of the course's statistical tests). It yields ``judge(value)``, called on the
    returned value: ``None`` if the call is fine, else ``(mistake id, message)``, which fails
    the case. Chapter 9's Triton checks (bounds, launches) are one.
    """

    def around_call(self) -> AbstractContextManager[
            Callable[[Any], tuple[str, str] | None]]:
        raise NotImplementedError

    def warm(self) -> None:
        """Prepare, before each fork, in the process a check's worker is forked from (the
        learner's session, or the grading server): import or build whatever :meth:`around_call`
        and its ``judge`` need the first time, so the worker inherits it. In the worker they run
        under its reporting trace, which refuses code it does not trust, such as the ``<string>``
        code a first import compiles (``namedtuple``). Must leave the session as it was (flags,
        warnings filters, RNG). The default does nothing."""


_ORDER = itertools.count()


@dataclass
class Exercise:
    """Declaration of one exercise; see the package docstring for a full example.

    Attributes:
        id: unique id used by ``check(id, fn)``.
        chapter: the chapter notebook's name, e.g. ``"03_softmax"``.
        title: a short human title.
        signature: what the learner writes, e.g. ``"softmax(x, dim=-1) -> Tensor like x"``.
        params: the parameter names, in order (used to describe cases).
        cases: ``cases(gen: torch.Generator) -> list[Case]``; fresh random values every call.
        oracle: the trusted implementation (course_lib/torch), called as ``oracle(*case.args)``.
        solution: the readable reference solution; ``solution(id)`` shows its source.
        hints: graded hints, the last nearly gives it away.
        mistakes: known misconceptions, most specific first.
        forbidden: keys of :data:`FORBIDDEN_GROUPS` the learner must not call.
        tolerances: per-dtype ``(atol, rtol)`` overriding :data:`DEFAULT_TOLERANCES`.
        output_names: names of the returned tuple's elements, e.g. ``("out", "weights")``.
        allowed_course_calls: qualified names (or module prefixes) of course_lib functions the
            learner may call here, e.g. ``("course_lib.masks.causal_mask",)``; any other call
            into code that lives in the course_lib package is refused as "the course's own
            answer".
        magnitude: ``magnitude(*case.args)``: the size of the terms each output entry sums
            (shaped like the output, or a tuple of such / ``None`` per output). Where terms
            cancel, rounding is relative to it, not to the answer (``rtol`` applies to
            ``max(|expected|, magnitude)``); e.g. ``|q| @ |k|ᵀ / √E`` for ``q @ kᵀ / √E``.
        time_limit: seconds allowed per call of the learner's function (``check``'s default);
            ``time_limit_note`` is added to the message when a call exceeds it.
        extension: a :class:`CallExtension` judging each call beyond its value (chapter 9:
            the output was written by a Triton kernel).
        probes: the parametric hypotheses (``_probes.Probe``) that may explain a failure no
            declared mistake reproduces exactly: the scale, the positions, the mask, the axis,
            the merge rule, each with its value fitted to the learner's output.
        inputs_updated: the parameters the learner may update in place and return (a running
            result, e.g. a ring step's ``out`` and ``lse``); the statement says so.
    """

    id: str
    chapter: str
    title: str
    signature: str
    params: tuple[str, ...]
    cases: Callable[[torch.Generator], list[Case]]
    oracle: Callable[..., Any]
    solution: Callable[..., Any]
    hints: tuple[str, ...]
    mistakes: tuple[Mistake, ...] = ()
    forbidden: tuple[str, ...] = ()
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    output_names: tuple[str, ...] = ()
    allowed_course_calls: tuple[str, ...] = ()
    magnitude: Callable[..., Any] | None = None
    time_limit: float = 10.0
    time_limit_note: str = ""
    extension: CallExtension | None = None
    probes: tuple[Probe, ...] = ()
    inputs_updated: tuple[str, ...] = ()
    order: int = field(default_factory=lambda: next(_ORDER), repr=False)

    def __post_init__(self) -> None:
        if not self.hints:
            raise ValueError(f"exercise {self.id!r} needs at least one hint")
        unknown = [f for f in self.forbidden if f not in FORBIDDEN_GROUPS]
        if unknown:
            raise ValueError(f"exercise {self.id!r}: unknown forbidden groups {unknown}")
        ids = [m.id for m in self.mistakes]
        if len(ids) != len(set(ids)):
            raise ValueError(f"exercise {self.id!r}: duplicate mistake ids {ids}")
        said: dict[str, str] = {}
        for m in self.mistakes:     # one reported id, one diagnosis
            if said.setdefault(m.reported_id, m.message) != m.message:
                raise ValueError(f"exercise {self.id!r}: mistakes reported as "
                                 f"{m.reported_id!r} give different messages")

    @property
    def function_name(self) -> str:
        """The name the learner's function has in the starter (the text before ``(``)."""
        return self.signature.split("(", 1)[0].strip()

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0)))

    def solution_source(self) -> str:
        return textwrap.dedent(inspect.getsource(self.solution)).strip() + "\n"


def fresh_args(args: tuple[Any, ...], params: Sequence[str] = ()
               ) -> tuple[tuple[Any, ...], list[tuple[str, torch.Tensor, torch.Tensor]]]:
    """Copies of ``args`` for one call, and the ``(name, copy, original)`` tensors to watch.

    Tensors are cloned, :class:`OnceIterator` becomes a generator over clones. After the call
    each copy must still equal its original (the learner must not modify inputs in place).
    """
    watch: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    out = []
    for i, a in enumerate(args):
        name = params[i] if i < len(params) else f"argument {i + 1}"
        out.append(_fresh(a, name, watch))
    return tuple(out), watch


def _fresh(a: Any, name: str, watch: list[tuple[str, torch.Tensor, torch.Tensor]]) -> Any:
    if isinstance(a, torch.Tensor):
        c = a.clone()
        watch.append((name, c, a))
        return c
    if isinstance(a, OnceIterator):
        if a.hold is not None:
            return _stream(a.items, a.hold)
        clones = [_fresh(x, f"{name}[{j}]", watch) for j, x in enumerate(a.items)]
        return _once(clones)
    if isinstance(a, (list, tuple)):
        return type(a)(_fresh(x, f"{name}[{j}]", watch) for j, x in enumerate(a))
    return a


def _once(items: list[Any]) -> Iterator[Any]:
    yield from items


def _stream(items: list[Any], hold: int) -> Iterator[Any]:
    """Fresh copies of ``items``, one at a time; a block still referenced ``hold`` blocks later
    is noted in :data:`HELD_BLOCKS` (the reader kept it)."""
    refs: list[weakref.ref[Any]] = []
    for i, item in enumerate(items):
        kept = [j for j, r in enumerate(refs[:max(i - hold + 1, 0)]) if r() is not None]
        if kept:
            HELD_BLOCKS.append((i, kept[0]))
        block = item.clone() if isinstance(item, torch.Tensor) else item
        refs.append(weakref.ref(block) if isinstance(block, torch.Tensor) else (lambda: None))
        yield block
        del block
