"""Diagnosis by parametric probes: hypotheses with a parameter fitted to the learner's output.

A declared :class:`~._spec.Mistake` names a failure only when the learner's output equals its one
modelled output; a learner who made the same slip with a different side detail (a NaN guard, a
``nan_to_num``, ``1/√r`` where the mistake models ``1/√(r + R)``) fell back to "wrong values".
A :class:`Probe` is a *family* of hypotheses: ``model(value, *case.args)`` is the exercise's
computation with one thing changed to ``value`` (the scale factor, the first position, the
mask's diagonal, the softmax axis, the merge rule). ``values(*case.args)`` lists the candidate
values by label, per case (``"1/√r"`` is a different number on each case); a probe with
``fit_scale`` also solves for a free factor. A hypothesis (a label) is named when its model
explains every failing case *loosely* (:func:`loosely_same`: entries where either output is not
finite are set aside, so a NaN row and a zeroed fully-masked row are the same hypothesis) and is
itself wrong on each, where the learner's output is finite.

Each exercise declares the probes that apply to it (``Exercise.probes``, in its
``exercises.py``); the engine tries them after the declared mistakes, which stay as tests of the
probes. The message says what the output shows, the fix, and the chapter's section.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Tol = Callable[[torch.dtype], tuple[float, float]]

#: Tolerance slack of a probe's agreement with the learner, as ``same_output``'s default.
SLACK = 2.0


@dataclass(frozen=True)
class Probe:
    """A family of hypotheses about one thing the learner may have got wrong.

    Attributes:
        id: the mistake id reported for every label not in ``ids``.
        model: ``model(value, *case.args)``: the exercise's computation with ``value`` in place.
        values: ``values(*case.args) -> {label: value}``: the candidate values on one case,
            the right one left out (a label must mean the same slip on every case).
        shows: ``shows(label) -> str``: what the learner's output equals, e.g. "attention
            scaled by 1/√r"; completes "Your output equals ...".
        fix: what the exercise does instead and how to get there (one or two sentences).
        section: the chapter section that explains it, e.g. ``"10_inference: One cached step"``.
        ids: a more precise id per label (``{"0": "no_position_offset"}``).
        fit_scale: also fit a free factor: ``values`` then holds ``"right"``, the right factor,
            and the model is called with the fitted factor (the label ``"fitted"``).
    """

    id: str
    model: Callable[..., Any]
    values: Callable[..., dict[str, Any]]
    shows: Callable[[str], str]
    fix: str
    section: str
    ids: dict[str, str] = field(default_factory=dict)
    fit_scale: bool = False

    def message(self, label: str, detail: str = "") -> str:
        chapter, _, title = self.section.partition(": ")
        where = f"chapter {chapter.split('_', 1)[0].lstrip('0')}, § “{title}”"
        return (f"Your output equals {self.shows(label)}{detail}. {self.fix} "
                f"(See {where}.)")


def _tensors(a: Any) -> list[Any]:
    return list(a) if isinstance(a, (tuple, list)) else [a]


def loosely_same(a: Any, b: Any, tol: Tol) -> tuple[bool, int]:
    """Whether ``a`` (the learner's) agrees with ``b`` (a hypothesis's) where both are finite,
    and how many finite entries were compared. Non-finite entries on either side are set aside
    (NaN rows of a plain softmax, zeroed rows of a guarded one, -inf log-sum-exps), but not more
    than half of either output's entries."""
    xs, ys = _tensors(a), _tensors(b)
    if len(xs) != len(ys):
        return False, 0
    compared = 0
    for x, y in zip(xs, ys, strict=True):
        if not isinstance(y, torch.Tensor):
            if isinstance(x, torch.Tensor) or x != y:
                try:
                    if abs(float(x) - float(y)) > 1e-9 * max(abs(float(y)), 1.0):
                        return False, 0
                except Exception:
                    return False, 0
            continue
        if not isinstance(x, torch.Tensor) or x.shape != y.shape:
            return False, 0
        if x.dtype == torch.bool or y.dtype == torch.bool:
            if not torch.equal(x.bool(), y.bool()):
                return False, 0
            compared += x.numel()
            continue
        x64, y64 = x.detach().double(), y.detach().double()
        fx, fy = x64.isfinite(), y64.isfinite()
        both = fx & fy
        if x.numel() and (int((~fx).sum()) * 2 > x.numel() or int((~fy).sum()) * 2 > y.numel()):
            # mostly not finite: equal as they are, or nothing to say
            if not bool(((x64 == y64) | (x64.isnan() & y64.isnan()) | both).all()):
                return False, 0
        atol, rtol = _loosest(tol, x, y)
        close = (x64 - y64).abs() <= SLACK * (atol + rtol * y64.abs())
        if not bool((close | ~both).all()):
            return False, 0
        compared += int(both.sum())
    return True, compared


def differs(a: Any, b: Any, tol: Tol, learner: Any) -> bool:
    """Whether ``b`` (a hypothesis's output) is wrong against ``a`` (the right answer) on some
    entry where ``learner``'s output is wrong too (in value or in being finite): the hypothesis
    is a mistake, and the learner's mistake, not a right answer that happens to agree."""
    for x, y, w in zip(_tensors(a), _tensors(b), _tensors(learner), strict=False):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) \
                or not isinstance(w, torch.Tensor) or not x.shape == y.shape == w.shape:
            if not isinstance(x, torch.Tensor) and x != y and x != w:
                return True
            continue
        if x.dtype == torch.bool or y.dtype == torch.bool or w.dtype == torch.bool:
            if bool(((x.bool() != y.bool()) & (x.bool() != w.bool())).any()):
                return True
            continue
        x64, y64, w64 = x.detach().double(), y.detach().double(), w.detach().double()
        atol, rtol = _loosest(tol, x, y)
        if bool((_wrong(x64, y64, atol, rtol) & _wrong(x64, w64, atol, rtol)).any()):
            return True
    return False


def _wrong(right: torch.Tensor, v: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Where ``v`` differs from ``right``: in value, or in being finite (-inf agrees)."""
    both = right.isfinite() & v.isfinite()
    off = (right - v).abs() > atol + rtol * right.abs()
    return (both & off) | ((right.isfinite() != v.isfinite()) & ~(right.isneginf()
                                                                    & v.isneginf()))


def _loosest(tol: Tol, *values: torch.Tensor) -> tuple[float, float]:
    pairs = [tol(v.dtype) for v in values if v.is_floating_point()] or [tol(torch.float32)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _error(a: Any, b: Any) -> float:
    """The largest difference between two outputs, relative to their size, where both are
    finite (``inf`` if their structure differs)."""
    worst = 0.0
    xs, ys = _tensors(a), _tensors(b)
    if len(xs) != len(ys):
        return math.inf
    for x, y in zip(xs, ys, strict=True):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) \
                or x.shape != y.shape or x.dtype == torch.bool:
            continue
        x64, y64 = x.detach().double(), y.detach().double()
        keep = x64.isfinite() & y64.isfinite()
        if bool(keep.any()):
            worst = max(worst, float(((x64 - y64).abs() / (1 + y64.abs()))[keep].max()))
    return worst


def fit_factor(model: Callable[..., Any], args: tuple[Any, ...], learner: Any,
               right: float) -> float:
    """The factor ``f`` (on a log grid around ``right``, then refined) whose ``model(f, *args)``
    is closest to the learner's output."""
    def err(log_f: float) -> float:
        try:
            return _error(learner, model(math.exp(log_f), *args))
        except Exception:
            return math.inf
    centre = math.log(abs(right)) if right else 0.0
    grid = [centre + k * 0.1 for k in range(-50, 51)]
    errs = [err(g) for g in grid]
    k = min(range(len(grid)), key=errs.__getitem__)
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(40):   # golden section on the bracket
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if err(a) <= err(b):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2)


def _fmt(f: float) -> str:
    return f"{f:.3g}"


@dataclass
class Fitted:
    """A probe's hypothesis that explains every failing case: its id and message."""

    id: str
    message: str


def explain(probes: Sequence[Probe], runs: Sequence[Any], tol: Tol,
            fresh: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> Fitted | None:
    """The first hypothesis of ``probes`` that explains every failing run (``run.case.args``,
    ``run.outcome.value``, ``run.expected``, ``run.problem``); ``fresh(args)`` copies a case's
    arguments for one call. ``None`` when no hypothesis fits, or a failing run raised."""
    failing = [r for r in runs if r.problem is not None]
    if not failing or any(r.outcome.error_type for r in failing):
        return None
    for probe in probes:
        found = _explain_one(probe, failing, tol, fresh)
        if found is not None:
            return found
    return None


def _explain_one(probe: Probe, failing: Sequence[Any], tol: Tol,
                 fresh: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> Fitted | None:
    try:
        per_case = [probe.values(*fresh(r.case.args)) for r in failing]
    except Exception:
        return None
    labels = [k for k in per_case[0] if k != "right" and all(k in v for v in per_case)]
    if probe.fit_scale:
        labels.append("fitted")
    for label in labels:
        fitted: list[float] = []
        ok = True
        for r, values in zip(failing, per_case, strict=True):
            try:
                if label == "fitted":
                    value = fit_factor(probe.model, fresh(r.case.args), r.outcome.value,
                                       values["right"])
                    if abs(math.log(value / values["right"])) < 1e-3:
                        ok = False
                        break
                    fitted.append(value / values["right"])
                else:
                    value = values[label]
                out = probe.model(value, *fresh(r.case.args))
            except Exception:
                ok = False
                break
            same, compared = loosely_same(r.outcome.value, out, tol)
            if not same or not compared or not differs(r.expected, out, tol, r.outcome.value):
                ok = False
                break
        if not ok:
            continue
        detail = ""
        if label == "fitted":
            lo, hi = min(fitted), max(fitted)
            ratio = _fmt(lo) if hi - lo <= 1e-2 * hi else f"{_fmt(lo)} to {_fmt(hi)}"
            detail = f" (the right scale times {ratio})"
        return Fitted(probe.ids.get(label, probe.id), probe.message(label, detail))
    return None


def choice_probe(id: str, model: Callable[..., Any],
                 choices: Callable[..., dict[str, Any]] | dict[str, Any],
                 shows: dict[str, str], fix: str, section: str,
                 ids: dict[str, str] | None = None) -> Probe:
    """A probe over a few named alternatives (a mask, an axis, a merge rule): ``choices`` maps
    each label to the value ``model`` takes (or is ``choices(*args)``, per case); ``shows[label]``
    completes "Your output equals ..."."""
    values = choices if callable(choices) else (lambda *args: dict(choices))
    return Probe(id, model, values, lambda label: shows[label], fix, section, dict(ids or {}))


def scale_probe(model: Callable[..., Any], right: Callable[..., float],
                named: dict[str, Callable[..., float]], right_text: str, fix: str,
                section: str, ids: dict[str, str] | None = None,
                what: str = "attention with its scores multiplied by") -> Probe:
    """The scale of the scores: ``model(factor, *args)`` with the factor ``right(*args)`` is the
    right answer; ``named`` are the factors learners reach for (``"1/√r"``: ``lambda *a: ...``),
    and any other factor is fitted."""
    def values(*args: Any) -> dict[str, Any]:
        return {"right": right(*args), **{k: f(*args) for k, f in named.items()}}

    def shows(label: str) -> str:
        if label == "fitted":
            return f"{what} a factor other than {right_text}"
        return f"{what} {label} instead of {right_text}"
    return Probe("wrong_scale", model, values, shows, fix, section,
                 {"1": "no_scaling", **(ids or {})}, fit_scale=True)
