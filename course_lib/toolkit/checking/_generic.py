"""Hypotheses that hold for every exercise: fitted to the output's form, to the error raised, or
to the right computation with its inputs moved.

The exercise's own probes (``_probes.py``) know its maths (the scale, the positions, the mask).
What is left are slips of the same kind in every exercise, which a learner makes whatever the
chapter: the right values with the axes in another order or grouped by another reshape; the
right values in another dtype; a ``view`` of a transposed tensor; axes counted from the front on
an input with fewer dims; a count (bytes, FLOPs) off by one of its factors; a weight used
transposed; one input used where another belongs; the softmax of the right answer; the right
entries in the wrong places; a boolean mask that is a band with an edge moved, or with True and
False swapped. Each is a hypothesis checked against every failing case, with the parameter
fitted (which permutation, which factor, which weight, which input, which edge): named only when
it explains them all. The engine asks these after the declared mistakes and the exercise's
probes, and a failure inside one never breaks a check (``_engine._fit``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._probes import Fitted, Tol, _tensors, differs, loosely_same

#: the ids these hypotheses report (besides ``<weight>_transposed`` and ``<a>_used_for_<b>``)
NAMED_IDS = frozenset({"axes_in_wrong_order", "axes_grouped_wrongly", "right_values_wrong_dtype",
                       "view_of_non_contiguous", "axes_counted_from_front", "entries_misplaced",
                       "mask_edge_moved", "mask_inverted", "softmax_applied",
                       "factor_missing", "factor_extra"})


def is_generic_id(mistake: str | None, params: Sequence[str] = ()) -> bool:
    """Whether ``mistake`` is one of this module's diagnoses for an exercise with ``params``."""
    if not mistake:
        return False
    if mistake in NAMED_IDS:
        return True
    if mistake.endswith("_transposed"):
        return all(n in params for n in _split_names(mistake.removesuffix("_transposed"),
                                                      params))
    a, sep, b = mistake.partition("_used_for_")
    return bool(sep) and a in params and b in params


def _split_names(joined: str, params: Sequence[str]) -> list[str]:
    """``"w_gate_w_out"`` -> ``["w_gate", "w_out"]`` given the parameter names."""
    for name in sorted(params, key=len, reverse=True):
        if joined == name:
            return [name]
        if joined.startswith(name + "_"):
            rest = _split_names(joined[len(name) + 1:], params)
            if rest and all(n in params for n in rest):
                return [name, *rest]
    return [joined]


#: how many axes a permutation is searched over (5! = 120 candidates)
_MAX_PERMUTED_DIMS = 5


def _where(chapter: str) -> str:
    return f"(See the exercise's statement, chapter {chapter.split('_', 1)[0].lstrip('0')}.)"


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(int(s)) for s in t.shape) + ")"


def _named(names: Sequence[str], i: int, n: int) -> str:
    if n <= 1:
        return "your output"
    return f"your `{names[i]}`" if i < len(names) else f"element {i} of your output"


# --------------------------------------------------------------------------- the output's form
def _layout(learner: torch.Tensor, right: torch.Tensor, tol: Tol) -> tuple[str, str] | None:
    """How ``learner`` holds ``right``'s values in another shape: ``("permuted", dims)`` when it is
    ``right.permute(dims)``, ``("regrouped", "")`` when it is ``right.reshape(learner.shape)``,
    ``("permuted+regrouped", dims)`` when it is ``right.permute(dims).reshape(...)``."""
    if learner.numel() != right.numel() or learner.shape == right.shape or right.numel() == 0:
        return None
    if learner.dtype != right.dtype and not (learner.is_floating_point()
                                               and right.is_floating_point()):
        return None
    as_right = learner.to(right.dtype)

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        ok, compared = loosely_same(a, b, tol)
        return ok and compared > 0
    perms = (list(itertools.permutations(range(right.dim())))
             if 1 < right.dim() <= _MAX_PERMUTED_DIMS else [])
    if sorted(learner.shape) == sorted(right.shape):
        for p in perms:
            moved = right.permute(p)
            if moved.shape == learner.shape and same(as_right, moved):
                return "permuted", _from_end(p)
    if same(as_right.reshape(right.shape), right):
        return "regrouped", ""
    for p in perms[1:]:
        if same(as_right.reshape(-1), right.permute(p).reshape(-1)):
            return "permuted+regrouped", _from_end(p)
    return None


def _from_end(p: Sequence[int]) -> str:
    """A permutation as the axes it moves, counted from the end, so that one slip reads the same
    at any number of batch axes: ``(0, 2, 1)`` and ``(1, 0)`` are both ``(-1, -2)``."""
    n, k = len(p), 0
    while k < n and p[k] == k:
        k += 1
    return "(" + ", ".join(str(d - n) for d in p[k:]) + ")"


def explain_form(ex: Any, runs: Sequence[Any], tol: Tol) -> Fitted | None:
    """A wrong shape or dtype whose values are right: the layout, or the dtype, is the slip."""
    failing = [r for r in runs if r.problem is not None]
    if not failing or any(r.problem.kind not in ("shape", "dtype") for r in failing):
        return None
    names = tuple(ex.output_names)
    found: set[tuple[str, str, int]] = set()
    example = ""
    for r in failing:
        mine, right = _tensors(r.outcome.value), _tensors(r.expected)
        if len(mine) != len(right):
            return None
        for i, (x, y) in enumerate(zip(mine, right, strict=True)):
            if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
                return None
            if x.shape == y.shape and x.dtype == y.dtype:
                if not loosely_same(x, y, tol)[0]:
                    return None
                continue
            if x.shape == y.shape:                                 # only the dtype differs
                same = (torch.equal(x != 0, y) if y.dtype == torch.bool
                        else loosely_same(x.to(y.dtype), y, tol)[0]) if x.numel() else True
                if not same:
                    return None
                found.add(("dtype", f"{x.dtype} for {y.dtype}", i))
                example = example or (f"{_named(names, i, len(right))} has dtype "
                                      f"{str(x.dtype).removeprefix('torch.')} where the exercise "
                                      f"returns {str(y.dtype).removeprefix('torch.')}")
                continue
            layout = _layout(x, y, tol)
            if layout is None:
                return None
            found.add((layout[0], layout[1], i))
            example = example or f"{_named(names, i, len(right))} has shape {_shape(x)} " \
                                 f"where the exercise returns {_shape(y)}"
    kinds = {k for k, _, _ in found}
    if len(kinds) != 1 or len({(d, i) for _, d, i in found}) != len({i for _, _, i in found}):
        return None
    kind = kinds.pop()
    where = _where(ex.chapter)
    if kind == "dtype":
        target = next(iter(found))[1].rsplit("for torch.", 1)[-1]
        return Fitted("right_values_wrong_dtype", (
            f"Your values are right, but {example}. Return {target} (convert at the end: "
            f"`.to(torch.{target})`, or `.bool()` for a mask): a float64 step or an integer 0/1 "
            f"tensor changes the dtype of what you return. {where}"))
    dims = next(iter(found))[1]
    if kind == "permuted":
        return Fitted("axes_in_wrong_order", (
            f"Your output holds the right values with its axes in another order: {example}, "
            f"and it equals the right answer's axes taken in the order {dims}. Put the axes in "
            "the order the signature gives (check each transpose/permute, and which of q and k "
            f"comes first in a product). {where}"))
    if kind == "regrouped":
        return Fitted("axes_grouped_wrongly", (
            f"Your output holds the right values in the right order, grouped into other axes: "
            f"{example}. A reshape, view or flatten merges or splits the wrong axes: return the "
            f"shape the signature gives. {where}"))
    return Fitted("axes_grouped_wrongly", (
        f"Your output holds the right values, moved and regrouped: {example}; its entries are "
        f"the right answer's with the axes in the order {dims}, then reshaped. Transpose the "
        "axes into the signature's order before the reshape that merges or splits them (or "
        f"leave out the reshape). {where}"))


# --------------------------------------------------------------------------- the error raised
_VIEW = re.compile(r"view size is not compatible with input tensor's size and stride")
_DIM = re.compile(r"Dimension out of range \(expected to be in range of \[-(\d+), \d+\]")


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def _rank(case: Any) -> int:
    return max((a.dim() for a in case.args if isinstance(a, torch.Tensor)), default=0)


def explain_raised(ex: Any, runs: Sequence[Any]) -> Fitted | None:
    """An error whose cause the error and the cases show: ``view`` of a transposed tensor, or
    axes counted from the front on an input with fewer dims than the cases that ran."""
    raised = [r for r in runs if r.problem is not None and r.problem.kind == "raised"]
    if not raised:
        return None
    texts = [_last_line(r.outcome.traceback_text) for r in raised]
    where = _where(ex.chapter)
    if all(_VIEW.search(t) for t in texts):
        return Fitted("view_of_non_contiguous", (
            "Your function calls `.view` on a tensor whose memory is no longer laid out in "
            "order (it was transposed or permuted first), and torch refuses. Use `.reshape`, "
            "which copies only when it must (or `.contiguous().view`). " + where))
    dim_raised = {_rank(r.case) for r, t in zip(raised, texts, strict=True) if _DIM.search(t)}
    passed = {_rank(r.case) for r in runs if r.problem is None}
    if dim_raised and passed and max(dim_raised) < min(passed):
        return Fitted("axes_counted_from_front", (
            f"Your function is right on inputs with {min(passed)} dims and raised on ones with "
            f"{max(dim_raised)}: it names axes from the front (dim 1, 2, `transpose(1, 2)`), "
            "which move when there are fewer batch axes. Count them from the end (`-1`, `-2`, "
            "`.mT`) so the function works for any leading shape. " + where))
    return None


# --------------------------------------------------------------------------- moved values
def _explains_all(failing: Sequence[Any], model: Callable[[tuple[Any, ...]], Any], tol: Tol,
                  fresh: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> bool:
    """Whether ``model`` explains every failing case: each output the learner got wrong equals
    the model's (where both are finite), each other output is right, and the model is itself
    wrong where the learner is (a moved input that changes nothing explains nothing). Outputs
    compared one by one: a ring step that used its own keys still passes on the held ones."""
    for r in failing:
        try:
            hyp = _tensors(model(fresh(r.case.args)))
        except Exception:
            return False
        mine, right = _tensors(r.outcome.value), _tensors(r.expected)
        if not len(mine) == len(right) == len(hyp):
            return False
        explained = False
        for x, y, h in zip(mine, right, hyp, strict=True):
            if loosely_same(x, y, tol)[0] and (not isinstance(x, torch.Tensor) or
                                               x.shape == y.shape):
                continue
            same, compared = loosely_same(x, h, tol)
            if not same or not compared or not differs(y, h, tol, x):
                return False
            explained = True
        if not explained:
            return False
    return True


def _softmax_of_right(failing: Sequence[Any], tol: Tol) -> bool:
    """Every failing output is the softmax, over its last axis, of the right one."""
    for r in failing:
        x, y = r.outcome.value, r.expected
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) \
                or not y.is_floating_point() or y.dim() == 0 or x.shape != y.shape:
            return False
        hyp = torch.softmax(y.detach().double(), dim=-1).to(y.dtype)
        same, compared = loosely_same(x, hyp, tol)
        if not same or not compared or not differs(y, hyp, tol, x):
            return False
    return True


def _rearranged(x: Any, y: Any, tol: Tol) -> bool:
    """``x`` holds exactly ``y``'s entries (as a multiset) in other places."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape \
            or not y.is_floating_point() or x.dtype != y.dtype or y.numel() < 4:
        return False
    xf, yf = x.detach().reshape(-1).double(), y.detach().reshape(-1).double()
    if not bool(xf.isfinite().all()) or not bool(yf.isfinite().all()):
        return False
    if torch.unique(yf).numel() < 4 or loosely_same(x, y, tol)[0]:
        return False
    return loosely_same(xf.sort().values, yf.sort().values, tol)[0]


def _pairs(params: Sequence[str], args: tuple[Any, ...]) -> list[tuple[int, int]]:
    """Pairs (a, b) of tensor arguments of the same shape and dtype: b may stand in for a."""
    idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0]
    return [(i, j) for i in idx for j in idx if i != j and args[i].shape == args[j].shape
            and args[i].dtype == args[j].dtype and i < len(params) and j < len(params)]


def _companions(params: Sequence[str], i: int, j: int) -> list[tuple[int, int]]:
    """``k_held`` replaced by ``k_own`` implies ``v_held`` replaced by ``v_own``: the other pairs
    of parameters that differ the same way (same suffixes, another prefix)."""
    a, b = params[i], params[j]
    if "_" not in a or "_" not in b:
        return []
    pa, sa = a.split("_", 1)
    pb, sb = b.split("_", 1)
    if pa != pb or sa == sb:
        return []
    out = []
    for k, name in enumerate(params):
        if k in (i, j) or "_" not in name:
            continue
        p, s = name.split("_", 1)
        if s == sa and f"{p}_{sb}" in params:
            out.append((k, params.index(f"{p}_{sb}")))
    return out


def explain_values(ex: Any, runs: Sequence[Any], tol: Tol,
                   fresh: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> Fitted | None:
    """Wrong values that are the right computation with its inputs moved: a weight transposed,
    one input in place of another; or the right entries in the wrong places."""
    failing = [r for r in runs if r.problem is not None]
    if not failing or any(r.problem.kind not in ("values", "nan", "inf") for r in failing):
        return None
    params = tuple(ex.params)
    where = _where(ex.chapter)
    first = failing[0].case.args
    # A count off by a factor: one of its own arguments, or 2 (K and V) or 8 (bits per byte).
    factor = _missing_factor(failing, params)
    if factor is not None:
        return Fitted(factor[0], factor[1] + " " + where)
    # Weights used transposed: 2-D square arguments (one, or several at once), transposed.
    square = [i for i, a in enumerate(first) if i < len(params) and isinstance(a, torch.Tensor)
              and a.dim() == 2 and a.shape[0] == a.shape[1] > 1
              and all(isinstance(r.case.args[i], torch.Tensor) and r.case.args[i].dim() == 2
                      for r in failing)]
    for k in range(1, min(len(square), 3) + 1):
        for chosen in itertools.combinations(square, k):
            def transposed(args: tuple[Any, ...], chosen: tuple[int, ...] = chosen) -> Any:
                args = list(args)
                for i in chosen:
                    args[i] = args[i].mT.contiguous()
                return ex.oracle(*args)
            if _explains_all(failing, transposed, tol, fresh):
                names = [params[i] for i in chosen]
                listed = " and ".join(f"`{n}`" for n in names)
                return Fitted("_".join(names) + "_transposed", (
                    f"Your output equals the right computation with {listed} transposed: your "
                    f"code multiplies by the transpose of {listed} where the statement uses "
                    f"{'it' if k == 1 else 'them'} as given (or the other way round). Check "
                    f"which axis of {listed} is the input and which the output in the statement "
                    f"(PyTorch's `nn.Linear` stores (out, in) and computes x Wᵀ), and write "
                    f"the product to match. {where}"))
    # One input in place of another (and its companions: k_held -> k_own with v_held -> v_own).
    tries: list[list[tuple[int, int]]] = []
    for i, j in _pairs(params, first):
        tries.append([(i, j)])                      # one input alone, then with its companions
        if _companions(params, i, j):
            tries.append([(i, j), *_companions(params, i, j)])
    for moves in tries:
        i, j = moves[0]

        def substituted(args: tuple[Any, ...], moves: list[tuple[int, int]] = moves) -> Any:
            args = list(args)
            for a, b in moves:
                args[a] = args[b]
            return ex.oracle(*args)
        if all(all(_pairs(params, r.case.args).count(m) for m in moves) for r in failing) \
                and _explains_all(failing, substituted, tol, fresh):
            used = ", ".join(f"`{params[b]}` where `{params[a]}` belongs" for a, b in moves)
            return Fitted(f"{params[j]}_used_for_{params[i]}", (
                f"Your output equals the right computation with {used}. Each input has its "
                f"own role in the statement: use `{params[i]}` there. {where}"))
    # The softmax of the right answer (scores returned as weights).
    if _softmax_of_right(failing, tol):
        return Fitted("softmax_applied", (
            "Your output equals the softmax (over the last axis) of the right answer: you "
            "went one step further than the exercise, which returns the values before any "
            f"softmax. Return them as they are. {where}"))
    # A boolean mask that is a band of other edges (or the band with True and False swapped).
    band = _explain_band(failing, names=tuple(ex.output_names))
    if band is not None:
        return Fitted(band[0], band[1] + " " + where)
    # The right entries, in the wrong places.
    names = tuple(ex.output_names)
    moved = []
    for r in failing:
        mine, right = _tensors(r.outcome.value), _tensors(r.expected)
        if len(mine) != len(right):
            return None
        wrong = [i for i, (x, y) in enumerate(zip(mine, right, strict=True))
                 if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                         and x.shape == y.shape and loosely_same(x, y, tol)[0])]
        if not wrong or not all(_rearranged(mine[i], right[i], tol) for i in wrong):
            return None
        moved += wrong
    if moved:
        what = _named(names, moved[0], len(_tensors(failing[0].expected)))
        return Fitted("entries_misplaced", (
            f"{what[0].upper() + what[1:]} has exactly the right entries, in the wrong places: "
            "the shape is right, but a reshape, repeat, concatenation or transpose puts values "
            "where others belong (which axis is repeated, split first, or comes first in a "
            f"concatenation?). Compare a small case with the statement by hand. {where}"))
    return None


# --------------------------------------------------------------------------- masks as bands
def _band_of(m: torch.Tensor) -> tuple[int, int] | None:
    """``(lo, hi)`` when the boolean ``m`` (..., L, S) is True exactly where lo <= j - i <= hi
    (every leading slice alike), else ``None``."""
    if m.dtype != torch.bool or m.dim() < 2 or not bool(m.any()):
        return None
    L, S = m.shape[-2:]
    d = torch.arange(S)[None, :] - torch.arange(L)[:, None]
    d = d.expand(m.shape)
    lo, hi = int(d[m].min()), int(d[m].max())
    return (lo, hi) if torch.equal(m, (d >= lo) & (d <= hi)) else None


def _i(k: int) -> str:
    """Key ``i + k`` as the text says it: ``i``, ``i+2``, ``i-1``."""
    return f"i{k:+d}" if k else "i"


def _explain_band(failing: Sequence[Any], names: tuple[str, ...]) -> tuple[str, str] | None:
    """A wrong boolean mask explained as a band of keys per query: which edge moved (the
    diagonal in or out, the future let in, the window one key too wide or pointing forward), or
    the right band with True and False swapped. Fitted on every failing case."""
    told: list[str] = []
    ids: set[str] = set()
    for r in failing:
        x, y = r.outcome.value, r.expected
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) \
                or x.dtype != torch.bool or y.dtype != torch.bool or x.shape != y.shape:
            return None
        want = _band_of(y)
        if want is None:
            return None
        L, S = y.shape[-2:]
        got = _band_of(x)
        if torch.equal(~x, y):
            ids.add("mask_inverted")
            told.append("the right band with True and False swapped: True marks the keys a "
                        "query may attend to")
            continue
        if got is None:
            return None
        (lo, hi), (wlo, whi) = got, want
        parts = []
        if hi != whi:
            if hi > whi:
                parts.append(f"it lets query i see {hi - whi} key{'s' * (hi - whi > 1)} after "
                             f"the last one it may (up to key {_i(hi)} instead of "
                             f"{_i(whi)})" if whi else
                             f"it lets query i see keys after its own (up to key {_i(hi)}): the "
                             "future")
            else:
                parts.append("it hides the diagonal: query i does not see key i, its own"
                             if whi == 0 and hi == -1 else
                             f"it stops {whi - hi} key{'s' * (whi - hi > 1)} early (at key "
                             f"{_i(hi)} instead of {_i(whi)})")
        if lo != wlo and not (lo <= -(L - 1) and wlo <= -(L - 1) and lo <= -(S - 1)
                              and wlo <= -(S - 1)):
            if lo < wlo:
                parts.append(f"it reaches {wlo - lo} key{'s' * (wlo - lo > 1)} further back "
                             f"(from key {_i(lo)} instead of {_i(wlo)}): the window is too wide")
            else:
                parts.append(f"it starts {lo - wlo} key{'s' * (lo - wlo > 1)} late (from key "
                             f"{_i(lo)} instead of {_i(wlo)}): the window is too narrow or "
                             "points forward")
        if not parts:
            return None
        ids.add("mask_edge_moved")
        told.append("; ".join(parts))
    if len(ids) != 1:
        return None
    what = "your mask" if len(names) <= 1 else f"your `{names[0]}`"
    return ids.pop(), (f"{what[0].upper() + what[1:]} is a band of keys per query, but {told[0]}. "
                       "Write down, for one query i, the first and the last key it may see "
                       "(j - i at each edge, the diagonal j = i included or not), and build the "
                       "comparison from those.")


# --------------------------------------------------------------------------- counts
def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point() \
            and v.dtype != torch.bool:
        return float(v.item())
    return None


def _factors(params: Sequence[str], args: tuple[Any, ...]) -> dict[str, float]:
    """The factors a count may miss or repeat: each integer argument (by name), a dtype's bytes
    per element, 2 (K and V) and 8 (bits per byte)."""
    out: dict[str, float] = {}
    for name, a in zip(params, args, strict=False):
        if isinstance(a, int) and not isinstance(a, bool) and a >= 2:
            out[f"`{name}`"] = float(a)
        elif isinstance(a, torch.dtype):
            size = torch.empty((), dtype=a).element_size()
            if size >= 2:
                out[f"the bytes per element of `{name}`"] = float(size)
    out.setdefault("2", 2.0)
    out.setdefault("8", 8.0)
    return out


def _missing_factor(failing: Sequence[Any], params: Sequence[str]) -> tuple[str, str] | None:
    """A whole-number answer (a count of bytes or FLOPs) that is the right one multiplied or
    divided by the same factor on every failing case."""
    labels: set[tuple[str, str]] | None = None
    shown = ""
    for r in failing:
        got, want = _number(r.outcome.value), _number(r.expected)
        if got is None or want is None or want == 0 or got == want:
            return None
        ratio = got / want
        here = set()
        for label, f in _factors(params, r.case.args).items():
            if abs(ratio - 1 / f) <= 1e-9 / f:
                here.add(("missing", label))
            elif abs(ratio - f) <= 1e-9 * f:
                here.add(("extra", label))
        labels = here if labels is None else labels & here
        if not labels:
            return None
        shown = shown or f"{int(got) if got.is_integer() else got} instead of " \
                         f"{int(want) if want.is_integer() else want}"
    assert labels is not None
    # a named argument explains it better than a bare constant that happens to agree
    how, label = sorted(labels, key=lambda hl: (not hl[1].startswith(("`", "the")), hl))[0]
    if how == "missing":
        return "factor_missing", (
            f"Your count is the right one divided by {label} ({shown} on the first failing "
            f"case): a factor {label} is missing from your product. Write the count as a "
            "product of every factor the statement lists and check each is there.")
    return "factor_extra", (
        f"Your count is the right one multiplied by {label} ({shown} on the first failing "
        f"case): a factor {label} too many. Write the count as a product of every factor the "
        "statement lists and check none is there twice.")
