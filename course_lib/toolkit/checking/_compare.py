"""Compare a learner's output with the oracle's without revealing the expected values.

:func:`compare` returns ``None`` (correct) or a :class:`Problem` whose ``text`` is deterministic
(types, shapes, dtypes, counts of wrong entries are *not* included) and whose ``where`` holds the
value-dependent details (first wrong index, largest error).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ._describe import describe_type, dtype_str, shape_str
from ._wire import Opaque  # what the check's worker could only describe

Tol = Callable[[torch.dtype], tuple[float, float]]


@dataclass
class Problem:
    kind: str   # none | numpy | type | length | shape | dtype | nan | inf | values
    text: str   # deterministic
    where: str = ""  # value-dependent details (index, size of the error)


def _index(idx: torch.Tensor) -> str:
    return "(" + ", ".join(str(int(i)) for i in idx) + ")" if idx.numel() != 1 \
        else f"({int(idx[0])},)"


def _not_tensor(actual: Any, what: str) -> Problem:
    if isinstance(actual, Opaque) and actual.tensor_subclass:
        return Problem("type", f"{what} is a {describe_type(actual)}, a subclass of torch.Tensor; "
                               "return a plain torch.Tensor (x.as_subclass(torch.Tensor)).")
    if isinstance(actual, Opaque) and actual.layout:
        return Problem("type", f"{what} is a {actual.layout} tensor; return an ordinary dense "
                               "tensor (.to_dense()).")
    if actual is None:
        return Problem("none", f"{what} is None: did you forget the `return` statement?")
    if isinstance(actual, np.ndarray):
        return Problem("numpy", f"{what} is a numpy.ndarray; return a torch.Tensor instead "
                                "(convert back with torch.from_numpy(...), or stay in torch ops).")
    return Problem("type", f"{what} is a {describe_type(actual)}; expected a torch.Tensor.")


def compare(expected: Any, actual: Any, tol: Tol, what: str = "your output",
            names: tuple[str, ...] = (), magnitude: Any = None) -> Problem | None:
    """``None`` if ``actual`` matches ``expected``, else the first :class:`Problem`.

    ``magnitude`` (a tensor shaped like ``expected``, or a tuple of them / ``None`` per
    element): the size of the terms each entry sums. Where terms cancel, float rounding is
    relative to it rather than to the answer, so ``rtol`` applies to ``max(|expected|,
    magnitude)``.
    """
    if isinstance(expected, (tuple, list)):
        n = len(expected)
        labels = names if len(names) == n else tuple(f"element {i}" for i in range(n))
        if not isinstance(actual, (tuple, list)):
            if actual is None:
                return Problem("none", f"{what} is None: did you forget the `return` statement? "
                                       f"Return a tuple ({', '.join(labels)}).")
            return Problem("type", f"{what} is a {describe_type(actual)}; expected a tuple of "
                                   f"{n} ({', '.join(labels)}).")
        if len(actual) != n:
            return Problem("length", f"{what} has {len(actual)} elements; expected {n} "
                                     f"({', '.join(labels)}).")
        mags = magnitude if isinstance(magnitude, (tuple, list)) and len(magnitude) == n \
            else (None,) * n
        for e, a, label, mag in zip(expected, actual, labels, mags, strict=True):
            p = compare(e, a, tol, what=f"the returned {label}", magnitude=mag)
            if p is not None:
                return p
        return None
    if isinstance(expected, bool) or not isinstance(expected, (torch.Tensor, numbers.Number)):
        return None if actual == expected else Problem("values", f"{what} is wrong.")
    if isinstance(expected, numbers.Integral):
        return _compare_int(int(expected), actual, what)
    if isinstance(expected, numbers.Real):
        e = torch.tensor(float(expected), dtype=torch.float64)
        return _compare_scalar(e, actual, tol, what)
    if expected.dim() == 0:
        return _compare_scalar(expected, actual, tol, what)
    return _compare_tensor(expected, actual, tol, what, magnitude)


def _compare_int(expected: int, actual: Any, what: str) -> Problem | None:
    if actual is None:
        return Problem("none", f"{what} is None: did you forget the `return` statement?")
    if isinstance(actual, bool) or not isinstance(actual, numbers.Integral):
        if isinstance(actual, torch.Tensor):
            return Problem("type", f"{what} is a torch.Tensor; return a Python int "
                                   "(use int(...) or .item()).")
        if isinstance(actual, numbers.Real):
            return Problem("type", f"{what} is a {describe_type(actual)}; counts are whole "
                                   "numbers: return an int (avoid `/`, use `//` or int(...)).")
        return Problem("type", f"{what} is a {describe_type(actual)}; expected an int.")
    if int(actual) != expected:
        ratio = int(actual) / expected if expected else float("nan")
        return Problem("values", f"{what} is wrong (it is {int(actual)}).",
                       where=f"ratio to the right answer: {ratio:.4g}")
    return None


def _as_scalar(actual: Any) -> float | None:
    if isinstance(actual, torch.Tensor) and actual.numel() == 1 and actual.is_floating_point():
        return float(actual.detach().reshape(()).double())
    if isinstance(actual, numbers.Real) and not isinstance(actual, bool):
        return float(actual)
    if isinstance(actual, np.ndarray) and actual.size == 1:
        return float(actual.reshape(()))
    return None


def _compare_scalar(expected: torch.Tensor, actual: Any, tol: Tol, what: str) -> Problem | None:
    if actual is None:
        return Problem("none", f"{what} is None: did you forget the `return` statement?")
    value = _as_scalar(actual)
    if value is None:
        return Problem("type", f"{what} is a {describe_type(actual)}"
                       + (f" of shape {shape_str(actual.shape)}"
                          if isinstance(actual, torch.Tensor) else "")
                       + "; expected a single number (a 0-dim tensor or a float).")
    e = float(expected.double())
    atol, rtol = tol(expected.dtype)
    if value != value and e == e:
        return Problem("nan", f"{what} is NaN.")
    # an infinite answer is matched only by itself (rtol·∞ would let any finite number pass)
    if value == e or (math.isfinite(e) and abs(value - e) <= atol + rtol * abs(e)):
        return None
    return Problem("values", f"{what} is wrong.",
                   where=f"relative error {abs(value - e) / max(abs(e), 1e-30):.3g}")


def _compare_tensor(expected: torch.Tensor, actual: Any, tol: Tol, what: str,
                    magnitude: Any = None) -> Problem | None:
    if not isinstance(actual, torch.Tensor):
        return _not_tensor(actual, what)
    if actual.layout != torch.strided:
        return Problem("type", f"{what} is a {str(actual.layout).replace('torch.', '')} tensor; "
                               "return an ordinary dense tensor (.to_dense()).")
    if actual.shape != expected.shape:
        return Problem("shape", f"{what} has shape {shape_str(actual.shape)}; expected "
                                f"{shape_str(expected.shape)}.")
    if actual.dtype != expected.dtype:
        hint = " (True/False: build it with comparisons, or convert with .bool())" \
            if expected.dtype == torch.bool else " (the same dtype as the inputs)"
        return Problem("dtype", f"{what} has dtype {dtype_str(actual.dtype)}; expected "
                                f"{dtype_str(expected.dtype)}{hint}.")
    a = actual.detach().cpu()
    e = expected.detach().cpu()
    if not e.is_floating_point():
        bad = a != e
        if not bad.any():
            return None
        first = bad.nonzero()[0]
        return Problem("values", f"{what} has wrong entries.",
                       where=f"{int(bad.sum())} of {bad.numel()} entries wrong, the first at "
                             f"index {_index(first)}")
    a64, e64 = a.double(), e.double()
    atol, rtol = tol(e.dtype)
    scale = e64.abs()
    if isinstance(magnitude, torch.Tensor) and magnitude.shape == e64.shape:
        scale = torch.maximum(scale, magnitude.detach().double().abs())
    # Within tolerance of a finite answer (an infinite one is matched only by itself, below:
    # rtol·∞ would let any finite number pass for it).
    close = ((a64 - e64).abs() <= atol + rtol * scale) & e64.isfinite()
    # Every entry close, with a finite bound: no NaN, no inf, nothing below to find.
    if bool(close.all()) and bool(scale.isfinite().all()):
        return None
    nan_bad = a64.isnan() & ~e64.isnan()
    if nan_bad.any():
        first = nan_bad.nonzero()[0]
        return Problem("nan", f"{what} contains NaN where the right answer has none.",
                       where=f"{int(nan_bad.sum())} NaN entries, the first at index "
                             f"{_index(first)}")
    inf_bad = a64.isinf() & ~(e64.isinf() & (a64 == e64))
    if inf_bad.any():
        first = inf_bad.nonzero()[0]
        return Problem("inf", f"{what} contains infinite values where the right answer is "
                              "finite (an overflow?).",
                       where=f"{int(inf_bad.sum())} inf entries, the first at index "
                             f"{_index(first)}")
    same = (a64 == e64) | close
    same |= e64.isnan() & a64.isnan()
    if bool(same.all()):
        return None
    bad = ~same
    first = bad.nonzero()[0]
    err = (a64 - e64).abs().masked_fill(~bad, 0).max()
    return Problem("values", f"{what} has the right shape and dtype but wrong values "
                             f"(tolerance: atol={atol:g}, rtol={rtol:g}).",
                   where=f"{int(bad.sum())} of {bad.numel()} entries wrong, the first at index "
                         f"{_index(first)}; largest error {float(err):.3g}")


#: How much looser than correctness the learner-vs-mistake comparison is. Both outputs are
#: floating-point evaluations of the same (wrong) formula: each lies within the correctness
#: tolerance of the exact value, so they lie within twice it of each other. (It was 10×, which
#: let a mistake whose output is right on ordinary inputs "explain" an almost-right output.)
MATCH_SLACK = 2.0


def _nothing(t: torch.Tensor) -> torch.Tensor:
    """NaN and -inf: both say "nothing to attend to" (an lse, a row maximum over no keys)."""
    return t.isnan() | (t == float("-inf"))


def same_output(a: Any, b: Any, tol: Tol, slack: float = MATCH_SLACK) -> bool:
    """Whether two outputs (learner's, a mistake's) agree: structure, shapes and values.

    Dtypes may differ; NaN and -inf agree with each other; tolerances are ``slack`` × ``tol``.
    """
    if isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and len(a) == len(b)
                and all(same_output(x, y, tol, slack) for x, y in zip(a, b, strict=True)))
    if isinstance(a, (tuple, list)):
        return False
    if isinstance(b, numbers.Number) and not isinstance(b, torch.Tensor):
        va = _as_scalar(a) if not isinstance(a, numbers.Integral) else float(a)
        if va is None:
            return False
        vb = float(b)
        return va == vb or abs(va - vb) <= 1e-9 * max(abs(vb), 1.0)
    if not isinstance(b, torch.Tensor):
        return False
    if b.dim() == 0:
        va = _as_scalar(a)
        if va is None:
            return False
        vb = float(b.double())
        if (va != va or va == float("-inf")) and (vb != vb or vb == float("-inf")):
            return True
        atol, rtol = _loosest(tol, a, b)
        return va == vb or (math.isfinite(vb) and abs(va - vb) <= slack * (atol + rtol * abs(vb)))
    if isinstance(a, np.ndarray):
        try:
            a = torch.from_numpy(np.ascontiguousarray(a))
        except Exception:
            return False
    if not isinstance(a, torch.Tensor) or a.shape != b.shape:
        return False
    a64, b64 = a.detach().cpu().double(), b.detach().cpu().double()
    atol, rtol = _loosest(tol, a, b)
    close = ((a64 - b64).abs() <= slack * (atol + rtol * b64.abs())) & b64.isfinite()
    if bool(close.all()):
        return True
    return bool((close | (a64 == b64) | (_nothing(a64) & _nothing(b64))).all())


def _loosest(tol: Tol, *values: Any) -> tuple[float, float]:
    """The loosest tolerance among the floating dtypes of ``values`` (float32 if none)."""
    dtypes = [v.dtype for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    pairs = [tol(d) for d in dtypes] or [tol(torch.float32)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)
