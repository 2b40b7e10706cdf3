"""Chapter 13 (attention across devices): merging two partial attentions by log-sum-exp, and one
causal step of ring attention."""

from __future__ import annotations

import math

import torch

from course_lib.attention.merge import merge_partials as _merge
from course_lib.attention.merge import partial_attention as _partial
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import choice_probe, scale_probe

_NEG_INF = float("-inf")

# --------------------------------------------------------------------------- merge_partials


def _merge_cases(gen: torch.Generator) -> list[Case]:
    def partials(shape, dtype, centre=0.0, spread=3.0):
        out = [torch.randn(*shape, generator=gen, dtype=dtype) for _ in range(2)]
        lse = [centre + spread * torch.randn(*shape[:-1], generator=gen, dtype=dtype)
               for _ in range(2)]
        return out, lse

    def case(name, out, lse, note):
        return Case(name, (out[0], lse[0], out[1], lse[1]), note=note)

    cases = []
    out, lse = partials((2, 3, 4, 5), torch.float64)
    cases.append(case("two blocks of keys", out, lse, "ordinary lse values of either sign"))
    out, lse = partials((1, 2, 6, 3), torch.float32, spread=6.0)
    cases.append(case("float32, one block dominates", out, lse,
                      "lse values far apart: one partial carries almost all the weight"))
    out, lse = partials((1, 2, 5, 4), torch.float64, centre=1000.0)
    cases.append(case("huge scores", out, lse, "lse near 1000: e^1000 overflows float64"))
    out, lse = partials((1, 1, 4, 3), torch.float64)
    out[0][..., 0, :] = 0.0
    lse[0][..., 0] = _NEG_INF                      # row 0: block a had no visible key
    for t in (0, 1):
        out[t][..., 2, :] = 0.0
        lse[t][..., 2] = _NEG_INF                  # row 2: neither block had one
    cases.append(case("empty rows", out, lse, "row 0 saw no key in block a (lse_a = -inf, "
                      "out_a = 0); row 2 saw no key in either"))
    return cases


def merge_partials(out_a, lse_a, out_b, lse_b):
    """Weights e^{lse - lse_new}, lse_new = m + log(e^{lse_a - m} + e^{lse_b - m})."""
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)   # both empty: no NaN
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)          # <= 1: no overflow
    lse = m + torch.log(w_a + w_b)
    out_a_w = torch.exp(lse_a - lse).nan_to_num(0.0).unsqueeze(-1)
    out_b_w = torch.exp(lse_b - lse).nan_to_num(0.0).unsqueeze(-1)
    return out_a_w * out_a + out_b_w * out_b, lse


def _no_rescale(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, _merge(out_a, lse_a, out_b, lse_b)[1]


def _mean(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, _merge(out_a, lse_a, out_b, lse_b)[1]


def _probability_space(out_a, lse_a, out_b, lse_b):
    total = lse_a + lse_b
    return ((lse_a / total).unsqueeze(-1) * out_a + (lse_b / total).unsqueeze(-1) * out_b,
            total)


def _no_max_shift(out_a, lse_a, out_b, lse_b):
    w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)
    total = w_a + w_b
    return ((w_a / total).unsqueeze(-1) * out_a + (w_b / total).unsqueeze(-1) * out_b,
            torch.log(total))


def _empty_rows_nan(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(w_a + w_b)
    return ((w_a / (w_a + w_b)).unsqueeze(-1) * out_a
            + (w_b / (w_a + w_b)).unsqueeze(-1) * out_b, lse)


def _lse_max(out_a, lse_a, out_b, lse_b):
    return _merge(out_a, lse_a, out_b, lse_b)[0], torch.maximum(lse_a, lse_b)


_MERGE_SECTION = "13_across_devices: One device first: two blocks of keys, merged"


def _merge_rule(rule, out_a, lse_a, out_b, lse_b):
    """A merge with its out rule and lse rule, ``rule = (out rule, lse rule)``."""
    out, lse = _merge(out_a, lse_a, out_b, lse_b)
    how_out, how_lse = rule
    if how_out == "swapped":
        out = _merge(out_b, lse_a, out_a, lse_b)[0]
    elif how_out == "keep_larger":
        out = torch.where((lse_a >= lse_b).unsqueeze(-1), out_a, out_b)
    elif how_out == "sum":
        out = out_a + out_b
    elif how_out == "mean":
        out = (out_a + out_b) / 2
    elif how_out == "ratio":
        total = (lse_a + lse_b).unsqueeze(-1)
        out = lse_a.unsqueeze(-1) / total * out_a + lse_b.unsqueeze(-1) / total * out_b
    elif how_out == "unshifted":
        e_a, e_b = torch.exp(lse_a).unsqueeze(-1), torch.exp(lse_b).unsqueeze(-1)
        out = e_a / (e_a + e_b) * out_a + e_b / (e_a + e_b) * out_b
    elif how_out == "unnormalised":
        top = torch.maximum(lse_a, lse_b).unsqueeze(-1)
        out = (torch.exp(lse_a.unsqueeze(-1) - top) * out_a
               + torch.exp(lse_b.unsqueeze(-1) - top) * out_b)
    m = torch.maximum(lse_a, lse_b)
    if how_lse == "max":
        lse = m
    elif how_lse == "sum":
        lse = lse_a + lse_b
    elif how_lse == "no_m":
        lse = lse - m.masked_fill(m == _NEG_INF, 0.0)
    elif how_lse == "unshifted":
        lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
    elif how_lse == "empty_zero":
        lse = lse.masked_fill(m == _NEG_INF, 0.0)
    return out, lse


_MERGE_OUT = {"lse": "weighted by e^{lse - lse_new}", "swapped": "out_a weighted by out_b's "
              "share and out_b by out_a's", "keep_larger": "the partial with the larger lse",
              "sum": "out_a + out_b", "mean": "(out_a + out_b) / 2",
              "ratio": "weighted by lse_a / (lse_a + lse_b), the lse values taken as sums",
              "unnormalised": "weighted by e^{lse_a - m} and e^{lse_b - m} (m = max(lse_a, "
                              "lse_b)), never divided by their sum",
              "unshifted": "weighted by e^{lse_a} / (e^{lse_a} + e^{lse_b}) with no shift (inf "
                           "/ inf = NaN where e^{lse} overflows)"}
_MERGE_LSE = {"right": "logaddexp(lse_a, lse_b)", "max": "max(lse_a, lse_b)",
              "sum": "lse_a + lse_b", "no_m": "log(e^{lse_a - m} + e^{lse_b - m}) without m "
              "added back", "empty_zero": "logaddexp(lse_a, lse_b) but 0 (not -inf) in a row "
              "that saw no key in either block",
              "unshifted": "log(e^{lse_a} + e^{lse_b}) with no shift (inf where e^{lse} "
                           "overflows)"}
_MERGE_CHOICES = {f"{o}/{lse}": (o, lse) for o in _MERGE_OUT for lse in _MERGE_LSE
                  if (o, lse) != ("lse", "right")}
_MERGE_IDS = {k: {"swapped": "weights_swapped", "keep_larger": "keeps_larger",
                  "sum": "no_rescale", "mean": "no_rescale", "ratio": "probability_space",
                  "unnormalised": "weights_not_normalised", "empty_zero": "empty_rows_lse",
                  "unshifted": "merge_not_shifted",
                  "max": "lse_max", "sum_lse": "lse_summed", "no_m": "lse_without_max"}[
                  o if o != "lse" else ("sum_lse" if lse == "sum" else lse)]
              for k, (o, lse) in _MERGE_CHOICES.items()}


_NO_RESCALE = (
    "Your merged output does not weigh the two partials: each is normalised over its own "
    "keys only, so out = e^{lse_a - lse} · out_a + e^{lse_b - lse} · out_b, where lse is the "
    "merged log-sum-exp. The weights are the share of each block in the merged sum; they add "
    "up to 1.")

MERGE_PARTIALS = Exercise(
    id="merge_partials",
    chapter="13_across_devices",
    title="Merge two partial attentions by log-sum-exp",
    signature="merge_partials(out_a (..., L, Ev), lse_a (..., L), out_b, lse_b) -> "
              "(out (..., L, Ev), lse (..., L))",
    params=("out_a", "lse_a", "out_b", "lse_b"),
    cases=_merge_cases,
    oracle=_merge,
    solution=merge_partials,
    output_names=("out", "lse"),
    hints=(
        "Each partial is normalised over its own keys: out_a = Σ_a e^{S - lse_a} V. The merged "
        "sum of exponentials is e^{lse_a} + e^{lse_b}, so lse = log(e^{lse_a} + e^{lse_b}), and "
        "out weighs out_a by e^{lse_a - lse}.",
        "Never form e^{lse} itself: with m = max(lse_a, lse_b), lse = m + log(e^{lse_a - m} + "
        "e^{lse_b - m}); every exponent is then <= 0. A row where both lse are -inf saw no key "
        "at all: keep out = 0 and lse = -inf there (m = -inf would give -inf - (-inf) = NaN).",
        "m = max(lse_a, lse_b), replaced by 0 where it is -inf; lse = m + log(exp(lse_a - m) + "
        "exp(lse_b - m)); out = exp(lse_a - lse)[..., None] · out_a + exp(lse_b - lse)[..., None]"
        " · out_b, with NaN weights (empty rows) set to 0.",
    ),
    mistakes=(
        Mistake("no_rescale", _NO_RESCALE, _no_rescale),
        Mistake("no_rescale_mean", _NO_RESCALE, _mean, family="no_rescale"),
        Mistake("probability_space", "You used the lse values as if they were the sums "
                "themselves: lse is a logarithm, the block's sum of exponentials is e^{lse}. "
                "Sums add as e^{lse_a} + e^{lse_b} (so lse = logaddexp(lse_a, lse_b), not "
                "lse_a + lse_b), and a block's weight is e^{lse_a - lse}, not lse_a / (lse_a + "
                "lse_b).", _probability_space),
        Mistake("no_max_shift", "You exponentiated the lse values directly: e^{lse} overflows "
                "to inf for scores near 1000 (float64) or 89 (float32), and inf / inf is NaN. "
                "Subtract m = max(lse_a, lse_b) first: lse = m + log(e^{lse_a - m} + "
                "e^{lse_b - m}) never overflows.", _no_max_shift),
        Mistake("empty_rows_nan", "A row whose lse_a and lse_b are both -inf saw no key in "
                "either block; your merge gives NaN there (-inf - (-inf)). Such a row must stay "
                "empty: out = 0 and lse = -inf. Replace m by 0 where it is -inf, and set the "
                "NaN weights to 0.", _empty_rows_nan),
        Mistake("lse_max", "Your output is right but the returned lse is max(lse_a, lse_b): "
                "the merged log-sum-exp is m + log(e^{lse_a - m} + e^{lse_b - m}), larger than "
                "either. The next merge (the next ring step) needs it exact.", _lse_max),
    ),
    probes=(
        choice_probe(
            "merge_rule", _merge_rule, _MERGE_CHOICES,
            {k: f"a merge whose out is {_MERGE_OUT[o]} and whose lse is {_MERGE_LSE[lse]}"
             for k, (o, lse) in _MERGE_CHOICES.items()},
            "Both sums of exponentials add: lse = m + log(e^{lse_a - m} + e^{lse_b - m}) with "
            "m = max(lse_a, lse_b) (logaddexp), and each partial, normalised over its own "
            "keys, is weighed by its share: out = e^{lse_a - lse} · out_a + e^{lse_b - lse} · "
            "out_b.", _MERGE_SECTION, ids=_MERGE_IDS),
    ),
)

# --------------------------------------------------------------------------- ring_step


def _ring_cases(gen: torch.Generator) -> list[Case]:
    W, c, E = 4, 3, 4

    def r(*shape, dtype=torch.float64):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    def case(name, rank, step, note, dtype=torch.float64, first=False):
        q, k_own, v_own = r(2, c, E, dtype=dtype), r(2, c, E, dtype=dtype), r(2, c, E, dtype=dtype)
        if step == 0:
            k_held, v_held = k_own.clone(), v_own.clone()
        else:
            k_held, v_held = r(2, c, E, dtype=dtype), r(2, c, E, dtype=dtype)
        if first:
            out, lse = torch.zeros(2, c, E, dtype=dtype), torch.full((2, c), _NEG_INF,
                                                                     dtype=dtype)
        else:
            out, lse = r(2, c, E, dtype=dtype), r(2, c, dtype=dtype)
        return Case(name, (q, k_own, v_own, k_held, v_held, out, lse, rank, step, W), note=note)

    return [
        case("step 0: the diagonal block", 2, 0, "rank 2 holds its own K/V; nothing merged "
             "yet (out = 0, lse = -inf)", first=True),
        case("an earlier block", 2, 1, "rank 2 holds rank 1's K/V: every key is in the past"),
        case("a future block", 1, 2, "rank 1 holds rank 3's K/V: every key is in the future"),
        case("wrapped round", 0, 1, "rank 0 holds rank 3's K/V (0 - 1 mod 4)", torch.float32),
        case("last step", 3, 3, "rank 3 holds rank 0's K/V"),
        case("diagonal again", 1, 0, "rank 1, step 0, with earlier partial results",
             torch.float32),
    ]


def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    """Causal ring step t on rank r: held K/V came from rank (r - t) mod W; pass it on."""
    source = (rank - step) % world
    if source > rank:                                   # a future block: skipped
        return out, lse, k_held, v_held
    scores = q @ k_held.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if source == rank:                                  # the diagonal block: mask j > i
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    lse_b = torch.logsumexp(scores, dim=-1)             # this block's partial result
    out_b = torch.softmax(scores, dim=-1) @ v_held
    lse_new = torch.logaddexp(lse, lse_b)               # merge: every row saw a key here
    out = (torch.exp(lse - lse_new).unsqueeze(-1) * out
           + torch.exp(lse_b - lse_new).unsqueeze(-1) * out_b)
    return out, lse_new, k_held, v_held


def _step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world, *, diagonal=0,
          future=False, send_own=False, reverse=False, no_diagonal_mask=False, past=True,
          factor=None, rule="lse", inverted=False, upper=False, skip_diagonal=False,
          past_causal=False):
    """The solution with one thing changed: the diagonal's mask (``diagonal``, none,
    ``inverted``, the ``upper`` triangle, the block skipped), which blocks are attended
    (``past``, ``future``) and whether earlier blocks are masked too, the source's direction,
    the scale ``factor``, the merge ``rule`` (:data:`_RULES`), what is sent on."""
    source = ((rank + step) if reverse else (rank - step)) % world
    part = None
    c = q.shape[-2]
    if (past and source < rank) or (future and source > rank):
        tri = torch.ones(c, c, dtype=torch.bool).tril() if past_causal and source < rank \
            else None
        part = _partial(q, k_held, v_held, tri, scale=factor)
    elif source == rank and not skip_diagonal:
        mask = None if no_diagonal_mask else torch.ones(c, c, dtype=torch.bool).tril(diagonal)
        if upper:
            mask = torch.ones(c, c, dtype=torch.bool).triu()
        if inverted:
            mask = ~mask
        part = _partial(q, k_held, v_held, mask, scale=factor)
    if part is not None:
        out, lse = _RULES[rule](out, lse, *part)
    if send_own:
        return out, lse, k_own, v_own
    return out, lse, k_held, v_held


#: How a step's partial result may be folded into the running one: the right merge and slips.
_RULES = {
    "lse": _merge,
    "sum": lambda o, l, ob, lb: (o + ob, _merge(o, l, ob, lb)[1]),
    "mean": lambda o, l, ob, lb: ((o + ob) / 2, _merge(o, l, ob, lb)[1]),
    "replace": lambda o, l, ob, lb: (ob, lb),
    "out_only": lambda o, l, ob, lb: (_merge(o, l, ob, lb)[0], l),
    "lse_max": lambda o, l, ob, lb: (_merge(o, l, ob, lb)[0], torch.maximum(l, lb)),
    "lse_sum": lambda o, l, ob, lb: (_merge(o, l, ob, lb)[0], l + lb),
}

_RING_SECTION = "13_across_devices: The ring"


def _ring_mistake(**change):
    return lambda *args: _step(*args, **change)


_OFF_BY_ONE = (
    "Your diagonal block (step 0, the rank's own keys) is masked one position off: query i of "
    "the block may see keys j <= i, itself included, so the mask is tril(diagonal=0). "
    "tril(-1) hides each token from itself (and leaves the first row with no key); tril(1) "
    "lets it see the next token.")

RING_STEP = Exercise(
    id="ring_step",
    chapter="13_across_devices",
    title="One causal step of ring attention",
    signature="ring_step(q, k_own, v_own, k_held, v_held (B, c, E), out (B, c, E), lse (B, c), "
              "rank, step, world) -> (out, lse, k_send, v_send)",
    params=("q", "k_own", "v_own", "k_held", "v_held", "out", "lse", "rank", "step", "world"),
    cases=_ring_cases,
    oracle=_step,
    solution=ring_step,
    output_names=("out", "lse", "k_send", "v_send"),
    allowed_course_calls=("course_lib.attention.merge",),
    hints=(
        "At step t, rank r holds the K/V block of rank (r - t) mod W (contiguous blocks: rank "
        "i holds positions i·c .. i·c + c - 1). Compare that source with r: a block before "
        "yours is entirely in the past, yours is the diagonal, one after yours is entirely in "
        "the future.",
        "Past block: out, lse = merge.merge_partials(out, lse, *merge.partial_attention(q, "
        "k_held, v_held)) (merge is course_lib.attention.merge). Diagonal: the same with "
        "mask = tril of a (c, c) block of ones (query i sees keys j <= i). Future block: "
        "nothing to compute. In every case pass the held block on.",
        "source = (rank - step) % world; if source < rank: merge the unmasked partial; elif "
        "source == rank: merge the partial with mask torch.ones(c, c, dtype=bool).tril(); "
        "return out, lse, k_held, v_held",
    ),
    mistakes=(
        Mistake("diagonal_unmasked", "You attended to the whole diagonal block: on its own "
                "keys (step 0) query i may see only keys j <= i of the block; mask it with "
                "tril(). Without the mask every token reads the tokens after it.",
                _ring_mistake(no_diagonal_mask=True)),
        Mistake("diagonal_excludes_self", _OFF_BY_ONE, _ring_mistake(diagonal=-1),
                family="diagonal_off_by_one"),
        Mistake("diagonal_sees_next", _OFF_BY_ONE, _ring_mistake(diagonal=1),
                family="diagonal_off_by_one"),
        Mistake("future_block_attended", "You attended to a block after the diagonal: when the "
                "held K/V came from a rank after yours (source > rank) every key is in the "
                "future of every query you hold, and the causal mask skips the whole block. "
                "Merge nothing; just pass the block on.", _ring_mistake(future=True)),
        Mistake("send_own", "You passed on your own K/V instead of the block you hold: the ring "
                "forwards what arrived (k_held, v_held), so that after W steps every block has "
                "visited every rank. Sending your own shard each step shows your neighbour the "
                "same block over and over.", _ring_mistake(send_own=True)),
        Mistake("source_reversed", "Your held block's source is off: blocks travel from rank r "
                "to rank r + 1, so at step t rank r holds the block of rank (r - t) mod W, not "
                "(r + t) mod W. With the wrong source, past and future blocks swap.",
                _ring_mistake(reverse=True)),
    ),
    inputs_updated=("out", "lse"),
    probes=(
        choice_probe(
            "diagonal_mask", lambda change, *a: _step(*a, **change),
            {"-1": {"diagonal": -1}, "+1": {"diagonal": 1}, "none": {"no_diagonal_mask": True},
             "inverted": {"inverted": True}, "upper": {"upper": True},
             "skipped": {"skip_diagonal": True}},
            {"-1": "a ring step whose diagonal block hides each token from itself "
                   "(tril(-1): the first row sees no key)",
             "+1": "a ring step whose diagonal block lets each token see the next one "
                   "(tril(1))",
             "none": "a ring step that attends to the whole diagonal block, unmasked",
             "inverted": "a ring step whose diagonal block is masked the other way round "
                         "(True where a key is hidden: the future kept, the past hidden)",
             "upper": "a ring step whose diagonal block keeps the upper triangle (triu(): "
                      "each token sees itself and the tokens after it, not those before)",
             "skipped": "a ring step that skips its own (diagonal) block as if it were in "
                        "the future"},
            "On its own keys (step 0) query i of the block may see keys j <= i, itself "
            "included: mask the diagonal block with tril() of a (c, c) block of ones, True "
            "where a key may be seen.", _RING_SECTION,
            ids={"-1": "diagonal_off_by_one", "+1": "diagonal_off_by_one",
                 "none": "diagonal_unmasked", "inverted": "diagonal_mask_inverted",
                 "upper": "diagonal_mask_inverted", "skipped": "diagonal_skipped"}),
        choice_probe(
            "blocks", lambda change, *a: _step(*a, **change),
            # the cases cannot tell a reversed source from skipped past blocks on every seed:
            # the reversed source (the likelier slip of the ring's direction) is tried first
            {"reversed": {"reverse": True}, "no_past": {"past": False},
             "future": {"future": True}, "no_past_future": {"past": False, "future": True},
             "past_masked": {"past_causal": True}},
            {"no_past": "a ring step that skips the blocks from earlier ranks",
             "future": "a ring step that also attends to blocks from later ranks",
             "no_past_future": "a ring step that attends to later ranks' blocks instead of "
                               "earlier ones",
             "reversed": "a ring step whose held block came from rank (r + t) mod W",
             "past_masked": "a ring step that masks an earlier rank's block with the causal "
                            "triangle too, though every key there is in the past"},
            "At step t rank r holds the block of rank (r - t) mod W. A block from an earlier "
            "rank is entirely in the past (attend to all of it), your own is the diagonal "
            "(causal mask), one from a later rank is entirely in the future (skip it).",
            _RING_SECTION,
            ids={"no_past": "past_block_skipped", "future": "future_block_attended",
                 "no_past_future": "source_compared_backwards",
                 "reversed": "source_reversed", "past_masked": "past_block_masked"}),
        choice_probe(
            "merge_rule", lambda rule, *a: _step(*a, rule=rule),
            {k: k for k in ("sum", "mean", "replace", "out_only", "lse_max", "lse_sum")},
            {"sum": "a ring step that adds the block's output to the running one",
             "mean": "a ring step that averages the block's output with the running one",
             "replace": "a ring step that replaces the running out and lse by the block's",
             "out_only": "a ring step that merges out right but returns the old lse",
             "lse_max": "a ring step that merges out right but returns max(lse, lse_block)",
             "lse_sum": "a ring step that merges out right but returns lse + lse_block"},
            "Each partial is normalised over its own keys: merge by log-sum-exp, lse_new = "
            "logaddexp(lse, lse_b), out = e^{lse - lse_new} · out + e^{lse_b - lse_new} · "
            "out_b, and return lse_new (the next step merges with it).", _RING_SECTION,
            ids={"sum": "merge_no_rescale", "mean": "merge_no_rescale",
                 "replace": "merge_replaces", "out_only": "lse_not_merged",
                 "lse_max": "lse_not_merged", "lse_sum": "lse_not_merged"}),
        scale_probe(
            lambda f, *a: _step(*a, factor=f), lambda q, *a: q.shape[-1] ** -0.5,
            {"1": lambda *a: 1.0, "1/E": lambda q, *a: 1 / q.shape[-1],
             "1/√c": lambda q, *a: q.shape[-2] ** -0.5},
            "1/√E", "Scale the scores by 1/√E, E = q.shape[-1], as every attention in the "
            "course.", _RING_SECTION),
    ),
)
