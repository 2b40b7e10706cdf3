"""Chapter 8 (Flash): ``online_softmax_stats``, a blockwise ``flash_attention`` and its
``flash_backward`` by recomputation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake, OnceIterator
from course_lib.toolkit.checking._probes import choice_probe
from course_lib.toolkit.checking._spec import HELD_BLOCKS, CallExtension

# --------------------------------------------------------------------------- online softmax


#: A block of the stream may still be referenced while the next is read (a loop's variable),
#: not two blocks later.
HOLD = 2


class _OnePass(CallExtension):
    """``online_softmax_stats`` reads its stream once and holds one block at a time: a call that
    kept earlier blocks (``list(blocks)``, ``torch.cat``, a list of blocks, two passes) is
    refused, whatever it returns, with the rule (the statement says it)."""

    @contextlib.contextmanager
    def around_call(self) -> Iterator[Any]:
        HELD_BLOCKS.clear()
        yield self.judge

    @staticmethod
    def judge(value: Any) -> tuple[str, str] | None:
        if not HELD_BLOCKS:
            return None
        read, held = HELD_BLOCKS[0]
        return "stream_held", (
            f"Your function still held block {held} of the stream when it read block {read}: "
            "this exercise reads its blocks once and keeps one at a time, as a kernel that "
            "never has the whole row in memory (list(blocks), torch.cat of the blocks, a list "
            "of them or two passes all keep them). Update m and ℓ block by block, and let each "
            "block go")


def _stats_cases(gen: torch.Generator) -> list[Case]:
    def r(n: int, dtype: torch.dtype = torch.float32, s: float = 1.0) -> torch.Tensor:
        return s * torch.randn(n, generator=gen, dtype=dtype)

    rising = [r(4), r(3) + 2.0, r(5) + 4.0]              # the max moves in every block
    falling = [r(4) + 4.0, r(6), r(2) - 3.0]              # the max is in the first block
    with_inf = [torch.full((2,), float("-inf")), r(3), r(4), r(3)]   # block 0: only -inf
    with_inf[2][2] = float("-inf")
    with_inf[1][0] = float("-inf")
    return [
        Case("rising maxima", (OnceIterator(rising, HOLD),)),
        Case("max in the first block", (OnceIterator(falling, HOLD),)),
        Case("one block", (OnceIterator([r(7, torch.float64)], HOLD),)),
        Case("float64, many blocks", (OnceIterator([r(n, torch.float64) for n in
                                                    (1, 5, 2, 8, 3)], HOLD),)),
        Case("large magnitudes", (OnceIterator([r(5, s=300.0), r(5, s=300.0) + 500.0,
                                                r(3, s=300.0)], HOLD),),
             note="entries in the hundreds: exp must never see them unshifted"),
        Case("-inf entries", (OnceIterator(with_inf, HOLD),),
             note="the first block is all -inf, and two more entries are -inf"),
        # drawn last, so the cases above keep their values for every seed
        Case("all entries negative", (OnceIterator([-r(4).abs() - 1.0, -r(3).abs() - 0.5,
                                                    -r(5).abs() - 2.0], HOLD),),
             note="every entry is below 0, so is the maximum"),
        Case("only -inf", (OnceIterator([torch.full((3,), float("-inf")),
                                         torch.full((2,), float("-inf"))], HOLD),),
             note="every entry is -inf (a row whose keys are all masked): m = -inf, ℓ = 0"),
    ]


def _stats_oracle(blocks):
    x = torch.cat([b.double() for b in blocks])
    m = x.max()
    dtype = torch.float64 if all(b.dtype == torch.float64 for b in blocks) else torch.float32
    if m == float("-inf"):                 # nothing to sum (and -inf - -inf would be NaN)
        return m.to(dtype), torch.zeros((), dtype=dtype)
    return m.to(dtype), torch.exp(x - m).sum().to(dtype)


def _stats_oracle_iter(blocks):
    return _stats_oracle(list(blocks))


def online_softmax_stats(blocks) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over 1-D blocks: m = max of all entries, ℓ = Σ exp(x - m), rescaled as m grows."""
    m = torch.tensor(float("-inf"))
    ell = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max().to(m.dtype))   # (eq-online-m)
        if m_new == float("-inf"):
            continue                  # only -inf so far: every term is 0 (and -inf - -inf = NaN)
        ell = (torch.exp(m - m_new) * ell                    # (eq-online-l)
               + torch.exp(block - m_new).sum())
        m = m_new
    return m, ell


def _like(blocks, m, l):
    dtype = torch.float64 if all(b.dtype == torch.float64 for b in blocks) else torch.float32
    return m.to(dtype), l.to(dtype)


def _stats_not_rescaled(blocks):
    blocks = list(blocks)
    m, l = torch.tensor(float("-inf"), dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for b in blocks:
        b = b.double()
        m = torch.maximum(m, b.max())
        l = l + torch.exp(b - m).sum()
    return _like(blocks, m, l)


def _stats_nan_on_inf_block(blocks):
    blocks = list(blocks)
    m, l = torch.tensor(float("-inf"), dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for b in blocks:
        b = b.double()
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()   # NaN while m_new is -inf
        m = m_new
    return _like(blocks, m, l)


def _stats_no_shift(blocks):
    blocks = list(blocks)
    xs = [b.double() for b in blocks]
    return _like(blocks, torch.cat(xs).max(), sum(torch.exp(b).sum() for b in xs))


def _stats_read_twice(blocks):
    """A first pass for m, a second for ℓ: the iterator is empty by then, ℓ = 0."""
    m, _ = _stats_oracle(list(blocks))
    return m, torch.zeros((), dtype=m.dtype)


def _stats_upside_down(blocks, *, from_first=False):
    """ℓ re-based by exp(m_new − m_old), from m = −inf and ℓ = 0 (``from_first``: from the first
    block's own max and sum instead)."""
    blocks = list(blocks)
    m, l = torch.tensor(float("-inf"), dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for i, b in enumerate(blocks):
        b = b.double()
        if from_first and i == 0:
            m = b.max()
            l = torch.exp(b - m).sum()
            continue
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m_new - m) + torch.exp(b - m_new).sum()
        m = m_new
    return _like(blocks, m, l)


def _stats_own_block_max(blocks):
    """Each block's terms relative to that block's own maximum, never re-based."""
    blocks = list(blocks)
    xs = [b.double() for b in blocks]
    return _like(blocks, torch.cat(xs).max(), sum(torch.exp(b - b.max()).sum() for b in xs))


def _stats_lse(blocks):
    m, l = _stats_oracle(list(blocks))
    return m, m + torch.log(l)


def _stats_max_from_zero(blocks):
    """The running maximum started at 0 instead of -inf: right whenever the maximum is >= 0."""
    return _stats_from(0.0, blocks)


#: finite stand-ins for -inf that a learner may start the running maximum from
_FINITE_STARTS = {"-1e4": -1e4, "-1e9": -1e9, "-1e20": -1e20, "-1e30": -1e30, "-1e38": -1e38,
                  "the lowest float32": float(torch.finfo(torch.float32).min),
                  "the lowest float64": float(torch.finfo(torch.float64).min)}


def _stats_from(start: float, blocks):
    """The online statistics with the running maximum started at ``start`` instead of -inf."""
    blocks = list(blocks)
    m = torch.tensor(start, dtype=torch.float64)
    l = torch.tensor(0.0, dtype=torch.float64)
    for b in blocks:
        b = b.double()
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return _like(blocks, m, l)


def _stats_last_max(blocks):
    blocks = list(blocks)
    m, l = torch.tensor(float("-inf"), dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for b in blocks:
        b = b.double()
        m_new = b.max()                                      # forgets the earlier maxima
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return _like(blocks, m, l)


ONLINE_SOFTMAX_STATS = Exercise(
    id="online_softmax_stats",
    chapter="08_flash",
    title="Online softmax statistics",
    signature="online_softmax_stats(blocks: iterator of 1-D tensors) -> (m, l)",
    params=("blocks",),
    output_names=("m", "l"),
    extension=_OnePass(),
    cases=_stats_cases,
    oracle=_stats_oracle_iter,
    solution=online_softmax_stats,
    tolerances={torch.float32: (1e-5, 1e-4)},
    hints=(
        "Keep two numbers while reading the blocks once: the largest entry so far m, and the "
        "sum l of exp(x - m) over the entries seen so far.",
        "When a block raises the maximum from m to m_new, every old term exp(x - m) must become "
        "exp(x - m_new): multiply the old sum by exp(m - m_new).",
        "m_new = max(m, block.max()); l = l * exp(m - m_new) + exp(block - m_new).sum(); "
        "m = m_new  (start from m = -inf, l = 0). While m_new is still -inf (only -inf "
        "entries so far) skip the block: exp(-inf - (-inf)) is NaN.",
    ),
    mistakes=(
        Mistake("sum_not_rescaled", "When the maximum grows you kept the old sum as it was. "
                "Its terms were exp(x - m_old); re-base them: l = l * exp(m_old - m_new) + ...",
                _stats_not_rescaled),
        Mistake("nan_on_inf_block", "A block of only -inf entries before any finite entry "
                "makes your l NaN: with m = m_new = -inf, m - m_new and block - m_new are "
                "-inf - (-inf) = NaN. Skip a block while the running maximum is still -inf (its "
                "terms are all exp(-inf) = 0).", _stats_nan_on_inf_block),
        Mistake("no_max_shift", "You returned Σ exp(x) without subtracting the maximum: l must "
                "be Σ exp(x - m) (that is what keeps exp from overflowing).", _stats_no_shift),
        Mistake("last_block_max", "Your m is the maximum of the last block only: keep the "
                "running maximum, m_new = max(m, block.max()).", _stats_last_max),
        Mistake("max_starts_at_zero", "Your m is 0 on a stream whose entries are all "
                "negative: the running maximum started at 0, which is larger than every entry, "
                "so it never moved (and l summed exp(x - 0)). Start from m = -inf (and l = 0): "
                "the first block's maximum then always replaces it.", _stats_max_from_zero),
        Mistake("swapped_outputs", "You returned (l, m): return (m, l), the maximum first.",
                lambda blocks: tuple(reversed(_stats_oracle(list(blocks))))),
        Mistake("iterator_read_twice", "Your l is 0: blocks is an iterator, and it can be read "
                "only once. A first pass (for the maximum) empties it, and the second pass (for "
                "the sum) sees no block at all. Update m and l together, in one loop over the "
                "blocks.", _stats_read_twice),
        *(Mistake(f"rescale_upside_down{suffix}", "You re-based the old sum with "
                  "exp(m_new − m_old): the factor is upside down (≥ 1 when the maximum grows, "
                  "and exp(+∞) = inf on the first block, where m_old = −inf: 0·inf is NaN). "
                  "Old terms exp(x − m_old) become exp(x − m_new) when multiplied by "
                  "exp(m_old − m_new) ≤ 1.", fn, family="rescale_upside_down")
          for suffix, fn in (("", _stats_upside_down),
                             ("_first_block", lambda b: _stats_upside_down(b, from_first=True)))),
        Mistake("block_max_only", "Your l adds each block's Σ exp(x − block max), each relative "
                "to its own block's maximum: terms in different units. Keep one running maximum "
                "m and re-base the sum whenever it grows: l = l·exp(m − m_new) + "
                "Σ exp(x − m_new).", _stats_own_block_max),
        Mistake("returned_lse", "Your second output is the log-sum-exp m + log(l), not l: "
                "return l = Σ exp(x − m) itself.", _stats_lse),
    ),
    probes=(
        choice_probe(
            "finite_start", _stats_from, _FINITE_STARTS,
            {k: f"the statistics with the running maximum started at {k} instead of -inf "
                f"(on a stream of only -inf, m stays {k})" for k in _FINITE_STARTS},
            "m is the maximum of the entries, and the maximum of only -inf entries is -inf: "
            "start from m = -inf (and l = 0), and skip a block while m_new is still -inf.",
            "08_flash: The online softmax, step by step", ids={}),
    ),
)

# --------------------------------------------------------------------------- flash attention


def _flash_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32, s: float = 1.0) -> torch.Tensor:
        return s * torch.randn(*shape, generator=gen, dtype=dtype)

    f64 = torch.float64
    return [
        Case("L not a multiple of the block", (r(1, 1, 10, 4), r(1, 1, 10, 4), r(1, 1, 10, 4),
                                               4)),
        Case("batched heads", (r(2, 3, 37, 8), r(2, 3, 37, 8), r(2, 3, 37, 8), 16)),
        Case("float64, block 7", (r(1, 2, 20, 6, dtype=f64), r(1, 2, 20, 6, dtype=f64),
                                  r(1, 2, 20, 6, dtype=f64), 7)),
        Case("large scores", (r(1, 2, 24, 8, s=8.0), r(1, 2, 24, 8, s=8.0), r(1, 2, 24, 8), 8),
             note="scores in the hundreds: the running maximum matters"),
        Case("block larger than L", (r(1, 1, 5, 3), r(1, 1, 5, 3), r(1, 1, 5, 3), 64)),
        # One batch of two heads: a (B, H, L, block) tile then holds fewer than 256² elements,
        # which the N×N watch also refuses in another shape (a flat score buffer).
        Case("L=256, default block", (r(1, 2, 256, 16), r(1, 2, 256, 16), r(1, 2, 256, 16)),
             note="no N×N tensor, N = 256: none with two dims >= 256, or as many elements",
             max_square=256),
        # Few queries, many keys: one query's row of 4096 scores already has as many elements
        # as a 64×64 matrix, so blocking by queries cannot fit; blocks of keys with the online
        # softmax do (a 16 × 64 tile).
        Case("few queries, many keys", (r(1, 1, 16, 8), r(1, 1, 4096, 8), r(1, 1, 4096, 8), 64),
             note="16 queries, 4096 keys: no tensor with 64² elements, not even one row of "
                  "scores; only key blocks with a running max and sum fit",
             max_square=64),
        # drawn last, so the cases above keep their values for every seed
        # every entry of q is >= 9 and of k <= -9, E = 4: each score <= -4·81/√4 = -162, below
        # float32's exp underflow (about -104) on every seed
        Case("every score far below 0", (r(1, 2, 12, 4).abs() * 6 + 9,
                                         -(r(1, 2, 12, 4).abs() * 6 + 9),
                                         r(1, 2, 12, 4), 4),
             note="queries and keys point opposite ways: every score is below -100, where "
                  "exp(s) underflows to 0 unless the running max starts at -inf"),
    ]


def _flash_oracle(q, k, v, block_size=64):
    return reference.scaled_dot_product_attention(q.double(), k.double(), v.double()).to(q.dtype)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    block_size: int = 64) -> torch.Tensor:
    """Attention (B, H, L, E) -> (B, H, L, E) over key blocks; never builds the L×S scores."""
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)   # running max
    ell = torch.zeros(rows, dtype=q.dtype)               # running sum
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        k_j = k[..., j0:j0 + block_size, :]
        v_j = v[..., j0:j0 + block_size, :]
        S_j = (q @ k_j.transpose(-2, -1)) * s            # (B, H, L, b)
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        alpha = torch.exp(m - m_new)                     # re-base old terms
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v_j
        m = m_new
    return O / ell


def _flash(q, k, v, block_size=64, *, rescale_l=True, rescale_acc=True, divide=True,
           scaled=True, shift=True, block_max=False, normalise_each=False,
           m_start=float("-inf")):
    """A float64 model of the solution with one mistake switched on (in the inputs' dtype where
    the mistake is an overflow). ``block_max``: each block re-based to its own maximum, not the
    running one (exact, until exp(m_old − m_block) overflows); ``normalise_each``: O divided by
    the running ℓ after every block, then only re-based by α (no final division); ``m_start``:
    the running max's first value (0: an underflow, in the inputs' dtype)."""
    dtype = q.dtype
    # an overflow (or underflow) must happen in the inputs' dtype
    work = dtype if not shift or block_max or m_start != float("-inf") else torch.float64
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    N = k.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), m_start, dtype=q.dtype)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    acc = torch.zeros_like(q)
    for start in range(0, N, block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True)) if shift else torch.zeros_like(m)
        if block_max:
            m_new = s.amax(dim=-1, keepdim=True)
        p = torch.exp(s - m_new)
        c = torch.exp(m - m_new) if shift else torch.ones_like(m)
        l = (l * c if rescale_l else l) + p.sum(dim=-1, keepdim=True)
        acc = (acc * c if rescale_acc else acc) + p @ v[..., start:start + block_size, :]
        if normalise_each:
            acc = acc / l
        m = m_new
    return (acc / l if divide and not normalise_each else acc).to(dtype)


def _flash_blocks(rule, q, k, v, block_size=64):
    """Attention over key blocks with the blocks combined by ``rule``: ``"drop_tail"`` (the last,
    partial block left out), ``"sum"`` / ``"mean"`` (each block's own softmax output, added or
    averaged: no running max or sum across blocks), ``"zero_start"`` (the running max starting
    at 0, in the inputs' dtype)."""
    if rule == "zero_start":
        return _flash(q, k, v, block_size, m_start=0.0)
    if rule == "not_rescaled":
        return _flash(q, k, v, block_size, rescale_l=False, rescale_acc=False)
    q64, k64, v64 = q.double(), k.double(), v.double()
    S = k.shape[-2]
    if rule == "drop_tail":
        full = S - S % block_size
        if full in (0, S):
            raise ValueError("no partial block to drop")
        return reference.scaled_dot_product_attention(q64, k64[..., :full, :],
                                                      v64[..., :full, :]).to(q.dtype)
    outs = [reference.scaled_dot_product_attention(q64, k64[..., j:j + block_size, :],
                                                   v64[..., j:j + block_size, :])
            for j in range(0, S, block_size)]
    total = torch.stack(outs).sum(0)
    return (total if rule == "sum" else total / len(outs)).to(q.dtype)


_FLASH_SECTION = "08_flash: The online softmax, step by step"

FLASH_ATTENTION = Exercise(
    id="flash_attention",
    tolerances={torch.float32: (1e-4, 1e-3)},  # float32 attention: exp amplifies rounding
    chapter="08_flash",
    title="Flash attention, block by block",
    signature="flash_attention(q (B, H, L, E), k, v (B, H, S, E), block_size=64) -> "
              "(B, H, L, E)",
    params=("q", "k", "v", "block_size"),
    cases=_flash_cases,
    oracle=_flash_oracle,
    solution=flash_attention,
    forbidden=("sdpa",),
    hints=(
        "Loop over blocks of block_size keys (and the matching values). For each query keep a "
        "running max m, a running sum ℓ (ell) of exp(score - m) and a running output "
        "O = Σ P·v.",
        "When a block raises the max from m to m_new, multiply both ℓ and O by "
        "α = exp(m - m_new) before adding the block's terms. Divide O by ℓ at the very end. "
        "Scale the scores by 1/√E.",
        "for each key block j: S_j = q @ k_jᵀ / √E; m_new = max(m, S_j.amax(-1)); "
        "P_j = exp(S_j - m_new); alpha = exp(m - m_new); ell = alpha*ell + P_j.sum(-1); "
        "O = alpha*O + P_j @ v_j; m = m_new. Return O / ell.",
    ),
    mistakes=(
        Mistake("sum_not_rescaled", "When a block raises the running max, you did not rescale "
                "the running sum ℓ: multiply it by α = exp(m_old - m_new) before adding the new "
                "block.", lambda q, k, v, b=64: _flash(q, k, v, b, rescale_l=False)),
        Mistake("output_not_rescaled", "When a block raises the running max, you did not "
                "rescale the running output: multiply O by α = exp(m_old - m_new) too.",
                lambda q, k, v, b=64: _flash(q, k, v, b, rescale_acc=False)),
        Mistake("missing_final_division", "You forgot the final division: return O / ℓ "
                "(the weights only sum to 1 after it).",
                lambda q, k, v, b=64: _flash(q, k, v, b, divide=False)),
        Mistake("no_scaling", "You forgot to scale the scores by 1/√E (E = q.shape[-1]).",
                lambda q, k, v, b=64: _flash(q, k, v, b, scaled=False)),
        Mistake("no_running_max", "You exponentiated the raw scores without subtracting a "
                "running maximum, so large scores overflow (exp(100) in float32 is inf). Keep a "
                "per-query running max m and use exp(s - m_new).",
                lambda q, k, v, b=64: _flash(q, k, v, b, shift=False)),
        Mistake("block_max_not_running", "You re-base each block to that block's own "
                "maximum, not to the running one: exact while exp(m_old − m_block) stays finite, "
                "but when a later block's maximum is far below an earlier one, that factor "
                "overflows (exp(100) in float32 is inf) and the row becomes NaN. Use "
                "m_new = max(m, block max): then α = exp(m − m_new) ≤ 1.",
                lambda q, k, v, b=64: _flash(q, k, v, b, block_max=True)),
        Mistake("normalised_every_block", "You divide O by the running ℓ after every block, but "
                "re-base it only by α: a normalised O must also be multiplied back by the old ℓ "
                "(O = (α·ℓ_old·O + P V)/ℓ_new). Simpler: keep O unnormalised (O = α·O + P V) and "
                "divide by ℓ once, at the end.",
                lambda q, k, v, b=64: _flash(q, k, v, b, normalise_each=True)),
    ),
    probes=(
        choice_probe(
            "blocks_combined", _flash_blocks,
            {k: k for k in ("drop_tail", "sum", "mean", "zero_start", "not_rescaled")},
            {"drop_tail": "attention over every key but those of the last, partial block "
                          "(S is not a multiple of block_size)",
             "sum": "the sum of each key block's own attention output, each normalised by its "
                    "own sum",
             "mean": "the mean of each key block's own attention output, each normalised by "
                     "its own sum",
             "zero_start": "the online softmax with its running max starting at 0: where "
                           "every score is far below 0, exp underflows to 0 and 0 / 0 is NaN",
             "not_rescaled": "the online softmax with neither ℓ nor O rescaled when the "
                             "maximum grows (the factor α = exp(m_old - m_new) is 1: taken "
                             "after m was already updated?)"},
            "One softmax runs over all S keys: loop over every block, the last one shorter when "
            "S is not a multiple of block_size (range(0, S, block_size) and slicing do that), "
            "carry the running max m (from -inf) and sum ℓ across blocks, rescale by "
            "α = exp(m - m_new), and divide by ℓ once at the end.", _FLASH_SECTION,
            ids={"drop_tail": "last_block_dropped", "sum": "blocks_not_merged",
                 "mean": "blocks_not_merged", "zero_start": "max_starts_at_zero",
                 "not_rescaled": "not_rescaled"}),
    ),
)

# --------------------------------------------------------------------------- flash backward

LOG2E = 1.0 / math.log(2.0)


def _forward_stats(q, k, v, is_causal):
    """``(out, lse)`` of softmax(q kᵀ/√E) v in float64 (lse = ln Σ e^S, natural log)."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    S = (q64 @ k64.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        L, Sk = S.shape[-2:]
        S = S.masked_fill(torch.ones(L, Sk, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(S, -1) @ v64).to(q.dtype), torch.logsumexp(S, -1).to(q.dtype)


def _backward_cases(gen: torch.Generator) -> list[Case]:
    def case(name, B, H, L, S, E, is_causal, block=64, dtype=torch.float32, s=1.0, offset=None,
             **kw):
        q, k = (s * torch.randn(B, H, n, E, generator=gen, dtype=dtype) for n in (L, S))
        v = torch.randn(B, H, S, E, generator=gen, dtype=dtype)
        if offset is not None:
            # Every score of query row i gets the same offset c_i in [lo, hi): a key component
            # that is 1 for all keys, times c_i·√E in the queries. The softmax does not change
            # (an offset per row cancels in it), but exp of any score overflows float32. P in
            # float32 is then only good to about 1e-4 (the scores are rounded near c_i) and dk's
            # terms carry the large query component: a small grad_out keeps that rounding below
            # the tolerances, while each known mistake is still far outside them.
            lo, hi = offset
            k[..., 0] = 1.0
            q[..., 0] = math.sqrt(E) * (lo + (hi - lo) * torch.rand(B, H, L, generator=gen,
                                                                  dtype=dtype))
        out, lse = _forward_stats(q, k, v, is_causal)
        grad_out = torch.randn(B, H, L, E, generator=gen, dtype=dtype)
        if offset is not None:
            grad_out = 1e-3 * grad_out
        return Case(name, (q, k, v, out, lse, grad_out, is_causal, block), **kw)

    f64 = torch.float64
    return [
        case("L != S, block 4", 1, 1, 10, 13, 4, False, 4),
        case("causal, batched heads", 2, 3, 37, 37, 8, True, 16),
        case("float64, block 7", 1, 2, 20, 23, 6, False, 7, f64),
        case("float64, causal, block 5", 1, 2, 19, 23, 6, True, 5, f64,
             note="L < S: query i sees keys 0..i (top-left, as torch's is_causal), the last "
                  "S − L keys no query"),
        case("large scores", 1, 2, 24, 24, 8, False, 8, offset=(330.0, 370.0),
             note="every score between about 320 and 380: exp of a score overflows float32, "
                  "exp of a score minus the saved lse does not"),
        case("L=256, causal, default block", 1, 2, 256, 256, 16, True,
             note="no N×N tensor, N = 256: none with two dims >= 256, or as many elements",
             max_square=256),
    ]


def _backward_magnitude(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    """The size of the terms each gradient entry sums: s·|dS| |k|, s·|dS|ᵀ |q|, Pᵀ |grad_out|.

    Where they cancel (a key component shared by every key gives dq a zero there, from terms in
    the hundreds), float32 rounding is relative to them, not to the gradient. Only the case with
    scores in the hundreds has such terms: with every |lse| below 50 (scores of a few units) the
    gradient's own size is the scale, and ``None`` spares the check an L×S product per case."""
    if float(lse.detach().abs().amax()) < 50:
        return None
    q64, k64, v64, o64, g64 = (t.detach().double() for t in (q, k, v, out, grad_out))
    s = 1.0 / math.sqrt(q.shape[-1])
    S = (q64 @ k64.transpose(-2, -1)) * s
    if is_causal:
        L, Sk = S.shape[-2:]
        S = S.masked_fill(torch.ones(L, Sk, dtype=torch.bool).triu(1), float("-inf"))
    P = torch.exp(S - lse.detach().double()[..., None])
    dS = (P * (g64 @ v64.transpose(-2, -1) - (g64 * o64).sum(-1, keepdim=True))).abs()
    return (s * dS @ k64.abs(), s * dS.transpose(-2, -1) @ q64.abs(),
            P.transpose(-2, -1) @ g64.abs())


def _backward_oracle(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o = reference.scaled_dot_product_attention(*leaves, is_causal=is_causal)
    grads = torch.autograd.grad(o, leaves, grad_out.double())
    return tuple(g.to(q.dtype) for g in grads)


def flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, grad_out: torch.Tensor, is_causal: bool = False,
                   block_size: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention, key block by key block, recomputing P_j = e^{S_j − lse}."""
    s = 1.0 / math.sqrt(q.shape[-1])
    D = (grad_out * out).sum(dim=-1, keepdim=True)       # D = rowsum(dO ∘ O), (B, H, L, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = torch.arange(q.shape[-2])[:, None]
    for j0 in range(0, k.shape[-2], block_size):
        k_j, v_j = k[..., j0:j0 + block_size, :], v[..., j0:j0 + block_size, :]
        S_j = (q @ k_j.transpose(-2, -1)) * s                # (B, H, L, b)
        if is_causal:
            cols = torch.arange(j0, j0 + k_j.shape[-2])
            S_j = S_j.masked_fill(cols > rows, float("-inf"))  # key j sees queries i >= j
        P_j = torch.exp(S_j - lse[..., None])                # recomputed, normalised
        dv[..., j0:j0 + block_size, :] = P_j.transpose(-2, -1) @ grad_out
        dS_j = P_j * (grad_out @ v_j.transpose(-2, -1) - D)  # P ∘ (dP − D)
        dq += s * dS_j @ k_j
        dk[..., j0:j0 + block_size, :] = s * dS_j.transpose(-2, -1) @ q
    return dq, dk, dv


def _backward(q, k, v, out, lse, grad_out, is_causal=False, block_size=64, *, d_term=True,
              ds_scale=True, log2_lse=False, causal_shift=0, dk_unscaled=False,
              bottom_right=False, exp_split=False, d_per_block=False, dq_last_block=False,
              block_softmax=False):
    """The solution with one known mistake switched on (see FLASH_BACKWARD's mistakes), in the
    inputs' dtype (an overflow happens where the learner's does)."""
    s = 1.0 / math.sqrt(q.shape[-1])
    D = (grad_out * out).sum(dim=-1, keepdim=True) if d_term else 0.0
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = torch.arange(q.shape[-2])[:, None]
    if bottom_right:                                   # the last query sees the last key
        causal_shift = k.shape[-2] - q.shape[-2]

    def probs(scores, cols):
        if is_causal:
            scores = scores.masked_fill(cols > rows + causal_shift, float("-inf"))
        if block_softmax:                              # normalised over the block's keys only
            m = scores.amax(dim=-1, keepdim=True)
            e = torch.exp(scores - m)
            return e / e.sum(dim=-1, keepdim=True)
        if exp_split:                                  # exp(S) / exp(lse): both overflow
            return torch.exp(scores) / torch.exp(lse[..., None])
        if log2_lse:                                   # exp2 with base-2 scores, ln-based lse
            return torch.exp2(scores * LOG2E - lse[..., None])
        return torch.exp(scores - lse[..., None])

    for j0 in range(0, k.shape[-2], block_size):
        k_j, v_j = k[..., j0:j0 + block_size, :], v[..., j0:j0 + block_size, :]
        cols = torch.arange(j0, j0 + k_j.shape[-2])
        P_j = probs((q @ k_j.transpose(-2, -1)) * s, cols)
        dP_j = grad_out @ v_j.transpose(-2, -1)
        dv[..., j0:j0 + block_size, :] = P_j.transpose(-2, -1) @ grad_out
        if d_per_block:                                # D over this block's keys only
            D = (P_j * dP_j).sum(dim=-1, keepdim=True)
        dS_j = P_j * (dP_j - D)
        c = s if ds_scale else 1.0
        dq = (0 if dq_last_block else dq) + c * dS_j @ k_j
        if dk_unscaled:                                # P for dK from q kᵀ without the 1/√E
            dS_j = probs(q @ k_j.transpose(-2, -1), cols) * (dP_j - D)
        dk[..., j0:j0 + block_size, :] = c * dS_j.transpose(-2, -1) @ q
    return dq, dk, dv


FLASH_BACKWARD = Exercise(
    id="flash_backward",
    tolerances={torch.float32: (1e-4, 1e-3)},
    chapter="08_flash",
    title="Flash backward, block by block",
    signature="flash_backward(q, k, v, out (B, H, L|S, E), lse (B, H, L), grad_out (B, H, L, E), "
              "is_causal=False, block_size=64) -> (dq, dk, dv)",
    params=("q", "k", "v", "out", "lse", "grad_out", "is_causal", "block_size"),
    output_names=("dq", "dk", "dv"),
    cases=_backward_cases,
    oracle=_backward_oracle,
    magnitude=_backward_magnitude,
    solution=flash_backward,
    forbidden=("sdpa", "autograd"),
    hints=(
        "Loop over key blocks k_j, v_j. Recompute the block's scores S_j = q @ k_jᵀ / √E "
        "(masked when causal) and from them the weights P_j = exp(S_j − lse): lse already "
        "holds the row's maximum and sum, so P_j comes out normalised.",
        "With D = rowsum(grad_out ∘ out) once per row: dv_j = P_jᵀ grad_out, "
        "dP_j = grad_out v_jᵀ, dS_j = P_j ∘ (dP_j − D). The scores were scaled by 1/√E, so "
        "dq and dk carry that factor.",
        "dq += dS_j @ k_j / √E; dk_j = dS_jᵀ @ q / √E; dv_j = P_jᵀ @ grad_out. Causal: key j is "
        "visible to query i only if j ≤ i.",
    ),
    mistakes=(
        Mistake("forgot_D", "You used dS = P ∘ dP and forgot the D term: the softmax's Jacobian "
                "gives dS = P ∘ (dP − D) with D = rowsum(grad_out ∘ out), one number per query "
                "row.", lambda *a: _backward(*a, d_term=False)),
        Mistake("dS_scale", "dq and dk are missing the factor 1/√E: the scores are "
                "S = q kᵀ/√E, so dq = dS k /√E and dk = dSᵀ q /√E.",
                lambda *a: _backward(*a, ds_scale=False)),
        Mistake("lse_base", "Your weights mix logarithm bases: lse is a natural logarithm "
                "(ln Σ e^S), so P = exp(S − lse). exp2(S·log2 e − lse) needs lse in base 2, "
                "lse·log2 e.", lambda *a: _backward(*a, log2_lse=True)),
        Mistake("causal_off_by_one", "Your causal mask in the backward lets query i see key "
                "i + 1: key j is visible only if j ≤ i (the diagonal included, nothing after it).",
                lambda *a: _backward(*a, causal_shift=1)),
        Mistake("dk_unscaled_scores", "dk comes from weights recomputed without the 1/√E: "
                "recompute P from S = q kᵀ/√E for dk exactly as for dq and dv.",
                lambda *a: _backward(*a, dk_unscaled=True)),
        Mistake("exp_then_divide", "You compute the weights as exp(S) / exp(lse) (or "
                "exp(S)·exp(−lse)): equal to exp(S − lse) on paper, but with scores in the "
                "hundreds exp(S) overflows float32 to inf (and exp(−lse) underflows to 0), so "
                "P is NaN. Subtract first, inside one exponential: P = exp(S − lse); the saved "
                "lse plays the part of the row maximum.", lambda *a: _backward(*a, exp_split=True)),
        Mistake("causal_excludes_diagonal", "Your causal mask also hides the diagonal (key i "
                "from query i; a `>=` where `>` was meant): key j is visible to query i when "
                "j ≤ i, so mask only j > i.", lambda *a: _backward(*a, causal_shift=-1)),
        Mistake("causal_bottom_right", "Your causal mask is aligned bottom-right (the last query "
                "sees the last key, key j visible when j ≤ i + S − L, as for a KV cache). This "
                "exercise's is_causal is torch's: top-left, key j visible to query i when j ≤ i, "
                "whatever L and S are.", lambda *a: _backward(*a, bottom_right=True)),
        Mistake("D_per_block", "Your D is rowsum(P_j ∘ dP_j) over the current key block only: "
                "D = rowsum(P ∘ dP) sums over all the row's keys. Compute it once, before the "
                "loop, as rowsum(grad_out ∘ out) (the two are equal).",
                lambda *a: _backward(*a, d_per_block=True)),
        Mistake("dq_overwritten", "Your dq holds the last key block's contribution only: dq is a "
                "sum over every key block (dq += dS_j k_j / √E), while dk and dv are written "
                "block by block.", lambda *a: _backward(*a, dq_last_block=True)),
        Mistake("normalised_per_block", "You recompute each block's weights with a softmax over "
                "that block's keys alone, so every block's weights sum to 1. The weights are "
                "normalised over the whole row: P_j = exp(S_j − lse), with the saved lse (that is "
                "what it is for).", lambda *a: _backward(*a, block_softmax=True)),
    ),
)
