"""The hypotheses that hold for every exercise (``checking/_generic.py``), issue 51.

Each wrong submission below is the exercise's own reference solution with one slip of a kind
no exercise declares: the axes in another order, regrouped, a dtype, a ``view`` of a transposed
tensor, axes counted from the front, a weight transposed, one input used for another, entries
moved, a mask's edge moved or its polarity swapped. Each must be named with its id and a message
that says what the output shows; a slip none of them explains keeps the generic verdict, and a
right solution is never touched. Run on the engine's bare path (no worker): these test the
diagnosis, not the sandbox.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._generic import _explain_band
from course_lib.toolkit.checking._registry import registry


def check(exercise: str, fn):
    return run_check(registry()[exercise], fn, seed=3, isolate=False, watch=False)


def solution(exercise: str):
    return registry()[exercise].solution


def _scores_swapped(q, k):
    return solution("scaled_scores")(q, k).transpose(-2, -1)


def _scores_front_axes(q, k):
    return q @ k.transpose(1, 2) / q.shape[-1] ** 0.5


def _split_folded(x, num_heads):
    out = solution("split_heads")(x, num_heads)
    return out.reshape(-1, *out.shape[-2:])


def _merge_view(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).view(B, L, H * E)


def _window_int(n, window):
    return solution("sliding_window_mask")(n, window).long()


def _mha_wo_transposed(x, w_qkv, w_o, num_heads):
    return solution("multi_head_attention")(x, w_qkv, w_o.mT, num_heads)


def _ring_own_kv(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    res = solution("ring_step")(q, k_own, v_own, k_own, v_own, out, lse, rank, step, world)
    return (*res[:2], k_held, v_held) if len(res) == 4 else res


def _repeat_along_sequence(x, n_rep):
    B, H, L, E = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, H * n_rep, L, E)


def _causal_sees_next(n):
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)


def _window_forward(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= i) & (j < i + window)


CASES = [
    ("scaled_scores", _scores_swapped, "axes_in_wrong_order", "(-1, -2)"),
    ("scaled_scores", _scores_front_axes, "axes_counted_from_front", "from the end"),
    ("split_heads", _split_folded, "axes_grouped_wrongly", "grouped into other axes"),
    ("merge_heads", _merge_view, "view_of_non_contiguous", ".reshape"),
    ("sliding_window_mask", _window_int, "right_values_wrong_dtype", "dtype int64"),
    ("multi_head_attention", _mha_wo_transposed, "w_o_transposed", "`w_o` transposed"),
    ("ring_step", _ring_own_kv, "k_own_used_for_k_held",
     "`k_own` where `k_held` belongs, `v_own` where `v_held` belongs"),
    ("repeat_kv", _repeat_along_sequence, "entries_misplaced", "in the wrong places"),
    ("causal_mask", _causal_sees_next, "mask_edge_moved", "up to key i+1"),
    ("sliding_window_mask", _window_forward, "mask_edge_moved", "points forward"),
]


@pytest.mark.parametrize("exercise, fn, mistake, says", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_a_slip_no_exercise_declares_is_named(exercise, fn, mistake, says):
    result = check(exercise, fn)
    assert not result.passed
    assert result.mistake == mistake, result.message
    assert says in result.message, result.message
    assert "chapter" in result.message          # where to read about it


def test_a_band_with_true_and_false_swapped_is_named_where_no_exercise_declares_it():
    """Both mask exercises declare the inverted mask, so the band's polarity is tested alone."""
    right = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)      # bottom-right causal
    run = SimpleNamespace(outcome=SimpleNamespace(value=~right), expected=right)
    mistake, message = _explain_band([run], names=())
    assert mistake == "mask_inverted" and "True and False swapped" in message
    shifted = SimpleNamespace(outcome=SimpleNamespace(value=right.tril(diagonal=1)),
                              expected=right)
    mistake, message = _explain_band([shifted], names=())
    assert mistake == "mask_edge_moved" and "stops 1 key early" in message, message
    scattered = right.clone()
    scattered[0, 4] = True                          # not a band: no hypothesis
    odd = SimpleNamespace(outcome=SimpleNamespace(value=scattered), expected=right)
    assert _explain_band([odd], names=()) is None


def test_a_slip_no_hypothesis_explains_keeps_the_generic_verdict():
    def shifted(q, k):
        return solution("scaled_scores")(q, k) + 1.0
    result = check("scaled_scores", shifted)
    assert not result.passed and result.mistake == "wrong_values", result.message


@pytest.mark.parametrize("exercise", ["scaled_scores", "split_heads", "merge_heads",
                                      "repeat_kv", "causal_mask", "sliding_window_mask",
                                      "ring_step", "multi_head_attention"])
def test_the_reference_solution_still_passes(exercise):
    assert check(exercise, solution(exercise)).passed


# --------------------------------------------------------------------------- issue 51's new labels
def _alibi_c1(H, L, S):
    slopes = 2.0 ** (-torch.arange(1, H + 1, dtype=torch.float64) / H)
    rel = torch.arange(S)[None, :] - torch.arange(S - L, S)[:, None]
    return (slopes[:, None, None] * rel).float()


def _rope_twice(x, offset=0, base=10000.0):
    once = solution("apply_rope")
    return once(once(x, offset, base), offset, base)


def _gate_added(attn, x, w_gate, w_out):
    return (attn + torch.sigmoid(x @ w_gate.T)) @ w_out.T


def _flash_drop_tail(q, k, v, block_size=64):
    full = k.shape[-2] - k.shape[-2] % block_size
    if full in (0, k.shape[-2]):
        return solution("flash_attention")(q, k, v, block_size)
    return solution("flash_attention")(q, k[..., :full, :], v[..., :full, :], block_size)


def _stats_from_minus_1e30(blocks):
    m, ell = torch.tensor(-1e30), torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max())
        ell = ell * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, ell


def _masked_over_queries(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-2).nan_to_num(0.0) @ v


def _ring(**change):
    def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
        from course_lib.attention import merge
        source = (rank - step) % world
        c = q.shape[-2]
        tril = torch.ones(c, c, dtype=torch.bool).tril()
        if source > rank or (source == rank and change.get("skip")):
            return out, lse, k_held, v_held
        if source == rank:
            mask = tril.T if change.get("upper") else tril
        else:
            mask = tril if change.get("past_masked") else None
        out, lse = merge.merge_partials(out, lse, *merge.partial_attention(q, k_held, v_held,
                                                                           mask))
        return out, lse, k_held, v_held
    return ring_step


def _scores_as_weights(q, k):
    return torch.softmax(solution("scaled_scores")(q, k), dim=-1)


def _scores_width_from_axis_1(q, k):
    return q @ k.transpose(-2, -1) / q.shape[1] ** 0.5


def _softmax_last_axis(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _softmax_guarded_overflow(x, dim=-1):
    e = torch.exp(x)
    return torch.nan_to_num(e / e.sum(dim=dim, keepdim=True))


def _rope_exponent_over_half(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    theta = base ** (-2 * torch.arange(E // 2, dtype=torch.float64) / (E / 2))
    angle = torch.arange(offset, offset + L, dtype=torch.float64)[:, None] * theta
    cos, sin = torch.cos(angle).repeat(1, 2).to(x.dtype), torch.sin(angle).repeat(1, 2).to(x.dtype)
    return x * cos + torch.cat([-x[..., E // 2:], x[..., :E // 2]], -1) * sin


def _masked_added(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask.float()
    return torch.softmax(s, dim=-1) @ v


def _flash_alpha_one(q, k, v, block_size=64):
    m = torch.full(q.shape[:-1] + (1,), float("-inf"))
    ell, o = torch.zeros(q.shape[:-1] + (1,)), torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-2, -1) / q.shape[-1] ** 0.5
        m = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m)
        ell, o = ell + p.sum(-1, keepdim=True), o + p @ v[..., j:j + block_size, :]
    return o / ell


def _merge_unshifted(out_a, lse_a, out_b, lse_b):
    ea, eb = lse_a.exp(), lse_b.exp()
    w = (ea / (ea + eb)).unsqueeze(-1)
    return w * out_a + (1 - w) * out_b, torch.logaddexp(lse_a, lse_b)


def _kv_bytes_one_layer(tokens, layers, heads, kv_heads, head_dim, dtype):
    return solution("kv_cache_bytes")(tokens, layers, heads, kv_heads, head_dim, dtype) // layers


def _ring_own_keys_held_values(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    return solution("ring_step")(q, k_own, v_own, k_own, v_held, out, lse, rank, step, world)


LABELS = [
    ("alibi_bias", _alibi_c1, "slopes_exponent", "times 0.125"),
    ("apply_rope", _rope_twice, "rotated_twice", "2·m·θ_i"),
    ("gated_attention", _gate_added, "gate_rule", "added to the heads' output"),
    ("flash_attention", _flash_drop_tail, "last_block_dropped", "last, partial block"),
    ("online_softmax_stats", _stats_from_minus_1e30, "finite_start", "started at -1e30"),
    ("masked_attention", _masked_over_queries, "softmax_over_queries", "over the queries"),
    ("ring_step", _ring(upper=True), "diagonal_mask_inverted", "upper triangle"),
    ("ring_step", _ring(skip=True), "diagonal_skipped", "skips its own"),
    ("ring_step", _ring(past_masked=True), "past_block_masked", "earlier rank's block"),
    ("scaled_scores", _scores_as_weights, "softmax_applied", "softmax (over the last axis)"),
    ("scaled_scores", _scores_width_from_axis_1, "wrong_scale", "a factor other than 1/√E"),
    ("softmax", _softmax_last_axis, "ignores_dim", "over the last axis"),
    ("softmax", _softmax_guarded_overflow, "not_stable", "the guard hides the overflow"),
    ("apply_rope", _rope_exponent_over_half, "wrong_frequencies", "base^(-4i/E)"),
    ("masked_attention", _masked_added, "mask_added", "added to the scores as 0/1"),
    ("flash_attention", _flash_alpha_one, "not_rescaled", "neither ℓ nor O rescaled"),
    ("merge_partials", _merge_unshifted, "merge_not_shifted", "with no shift"),
    ("kv_cache_bytes", _kv_bytes_one_layer, "factor_missing", "divided by `layers`"),
    ("ring_step", _ring_own_keys_held_values, "k_own_used_for_k_held",
     "`k_own` where `k_held` belongs. Each"),
]


@pytest.mark.parametrize("exercise, fn, mistake, says", LABELS,
                         ids=[f"{c[0]}-{c[2]}" for c in LABELS])
def test_the_new_probe_labels_name_their_slip(exercise, fn, mistake, says):
    result = check(exercise, fn)
    assert not result.passed
    assert result.mistake == mistake, result.message
    assert says in result.message, result.message


def _flash_max_from_zero(q, k, v, block_size=64):
    m = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    ell, o = torch.zeros_like(m), torch.zeros_like(q)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-2, -1) / q.shape[-1] ** 0.5
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, alpha = torch.exp(s - m_new), torch.exp(m - m_new)
        ell = alpha * ell + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v[..., j:j + block_size, :]
        m = m_new
    return o / ell


def test_a_running_max_from_zero_is_refused_and_named_on_every_seed():
    """The case built for it keeps every score below float32's exp underflow on any seed (its
    scores were once as high as -89 on some seeds, where exp does not reach 0)."""
    ex = registry()["flash_attention"]
    for seed in range(30):
        result = run_check(ex, _flash_max_from_zero, seed=seed, isolate=False, watch=False)
        # with every score below 0 the run is the unshifted one (m stays 0): either name fits
        assert not result.passed, seed
        assert result.mistake in ("max_starts_at_zero", "no_running_max"), (seed,
                                                                            result.message)
