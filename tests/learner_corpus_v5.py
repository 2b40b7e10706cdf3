"""Issue 51's corpus of learners' submissions: the three newest exercises (``mla_absorbed_step``,
``merge_partials``, ``ring_step``), ``multi_head_attention`` and eleven older ones.

Written from each chapter's text, each exercise's signature and hints, as a learner would, with
side details varied (NaN guards, ``nan_to_num``, ``torch.where`` for ``masked_fill``, einsum,
own RoPE helpers): the slips of scale, positions, masks, axes, order and merge rules that the
chapters warn about, and right answers in unusual styles. Not written from the declared
mistakes: a diagnosis must come from a probe that fits the output, not from a copy of the bug.

``V5`` lists ``(exercise id, verdict, function)``: ``"pass"``, or the mistake id the check
reports. Used by ``test_exercises_v5_corpus.py``; the shares measured before and after issue 51
are in that test's docstring.
"""

from __future__ import annotations

import math

import torch

from course_lib.attention import masks

# ----------------------------------------------------------------------- helpers a learner writes


def _rope_at(t, cos, sin, start):
    """Rotate t (..., L, R) by positions start .. start+L-1 (split halves)."""
    L = t.shape[-2]
    c, s = cos[start:start + L], sin[start:start + L]
    a, b = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]
    return t * c + torch.cat((-b, a), dim=-1) * s


def _guarded_softmax(scores):
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(scores - m)
    d = e.sum(-1, keepdim=True)
    return e / torch.where(d == 0, torch.ones_like(d), d)


# ------------------------------------------------------------------ mla_absorbed_step (ch. 10)


def _mla(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos, sin, *,
         start=None, scale=None, mask="br", rot_q=True, rot_k=True, sign=1.0, axis=-1,
         guard=False, einsum=False):
    B, H, L, N = q_nope.shape
    P, R, r = c_cache.shape[1], q_rope.shape[-1], c_new.shape[-1]
    pos = P if start is None else start(P)
    def rot(t):
        L_ = t.shape[-2]
        c, s = cos[pos:pos + L_], sin[pos:pos + L_]
        a, b = t.chunk(2, -1)
        return t * c + sign * torch.cat([-b, a], -1) * s
    c = torch.cat([c_cache, c_new], 1)
    k_r = torch.cat([k_rope_cache, rot(k_rope_new) if rot_k else k_rope_new], 1)
    w = w_kv_b.reshape(H, -1, r)
    w_uk, w_uv = w[:, :N, :], w[:, N:, :]
    qr = rot(q_rope) if rot_q else q_rope
    if einsum:
        q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
        s = torch.einsum("bhlr,bsr->bhls", q_lat, c) + torch.einsum("bhlR,bsR->bhls", qr, k_r)
    else:
        s = (q_nope @ w_uk) @ c.unsqueeze(1).mT + qr @ k_r.unsqueeze(1).mT
    s = s * (1.0 / math.sqrt(N + R) if scale is None else scale(N, R, r))
    S = P + L
    if mask == "br":
        keep = torch.ones(L, S, dtype=torch.bool).tril(S - L)
    elif mask == "tl":
        keep = torch.ones(L, S, dtype=torch.bool).tril()
    elif mask == "self_out":
        keep = torch.ones(L, S, dtype=torch.bool).tril(S - L - 1)
    else:
        keep = torch.ones(L, S, dtype=torch.bool)
    s = torch.where(keep, s, torch.tensor(float("-inf"), dtype=s.dtype))
    p = _guarded_softmax(s) if guard else torch.softmax(s, dim=axis)
    out = torch.einsum("bhls,bsr,hvr->bhlv", p, c, w_uv) if einsum \
        else (p @ c.unsqueeze(1)) @ w_uv.transpose(1, 2)
    return out, c, k_r


def mla_right_matmul(*a):
    return _mla(*a)


def mla_right_einsum_guarded(*a):
    return _mla(*a, einsum=True, guard=True)


def mla_right_naive_scores(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b,
                           cos, sin):
    """Decompress the keys for the scores (the slow path), cache only latents."""
    B, H, L, N = q_nope.shape
    P, R, r = c_cache.shape[1], q_rope.shape[-1], c_new.shape[-1]
    c = torch.cat([c_cache, c_new], 1)
    k_r = torch.cat([k_rope_cache, _rope_at(k_rope_new, cos, sin, P)], 1)
    w = w_kv_b.view(H, -1, r)
    k_nope = torch.einsum("bsr,hnr->bhsn", c, w[:, :N])
    v = torch.einsum("bsr,hvr->bhsv", c, w[:, N:])
    k = torch.cat([k_nope, k_r[:, None].expand(B, H, -1, R)], -1)
    q = torch.cat([q_nope, _rope_at(q_rope, cos, sin, P)], -1)
    keep = masks.causal_mask(L, P + L, align="bottom_right")
    s = (q @ k.mT / math.sqrt(N + R)).masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v, c, k_r


def mla_positions_from_zero(*a):
    return _mla(*a, start=lambda P: 0)


def mla_positions_from_zero_einsum(*a):
    return _mla(*a, start=lambda P: 0, einsum=True, guard=True)


def mla_positions_one_too_far(*a):
    return _mla(*a, start=lambda P: P + 1)


def mla_scale_latent_rank(*a):
    return _mla(*a, scale=lambda N, R, r: r ** -0.5)


def mla_scale_nope_only_einsum(*a):
    return _mla(*a, scale=lambda N, R, r: 1 / math.sqrt(N), einsum=True)


def mla_no_scale(*a):
    return _mla(*a, scale=lambda N, R, r: 1.0)


def mla_scale_rope_width(*a):
    return _mla(*a, scale=lambda N, R, r: 1 / math.sqrt(R), guard=True)


def mla_top_left_where(*a):
    return _mla(*a, mask="tl")


def mla_no_mask(*a):
    return _mla(*a, mask="none", einsum=True)


def mla_keys_unrotated(*a):
    return _mla(*a, rot_k=False)


def mla_query_unrotated(*a):
    return _mla(*a, rot_q=False, guard=True)


def mla_rotated_backwards(*a):
    return _mla(*a, sign=-1.0)


def mla_excludes_self(*a):
    return _mla(*a, mask="self_out", guard=True)


def mla_softmax_over_queries(*a):
    return _mla(*a, axis=-2)


# ------------------------------------------------------------------ merge_partials (ch. 13)


def mp_right_logaddexp(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    wa = torch.nan_to_num(torch.exp(lse_a - lse))[..., None]
    wb = torch.nan_to_num(torch.exp(lse_b - lse))[..., None]
    return wa * out_a + wb * out_b, lse


def mp_right_sigmoid(out_a, lse_a, out_b, lse_b):
    both_empty = torch.isneginf(lse_a) & torch.isneginf(lse_b)
    d = torch.where(both_empty, torch.zeros_like(lse_a), lse_a - lse_b)
    wa = torch.sigmoid(d)
    out = wa[..., None] * out_a + (1 - wa)[..., None] * out_b
    out = torch.where(both_empty[..., None], torch.zeros_like(out), out)
    return out, torch.logaddexp(lse_a, lse_b)


def mp_plain_sum(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)


def mp_average(out_a, lse_a, out_b, lse_b):
    return 0.5 * (out_a + out_b), torch.logaddexp(lse_a, lse_b)


def mp_keep_larger(out_a, lse_a, out_b, lse_b):
    take_a = (lse_a >= lse_b)[..., None]
    return torch.where(take_a, out_a, out_b), torch.maximum(lse_a, lse_b)


def mp_unshifted_exp(out_a, lse_a, out_b, lse_b):
    ea, eb = lse_a.exp(), lse_b.exp()
    tot = ea + eb
    return (ea / tot)[..., None] * out_a + (eb / tot)[..., None] * out_b, tot.log()


def mp_weights_swapped(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    wa = torch.nan_to_num(torch.exp(lse_a - lse))[..., None]
    wb = torch.nan_to_num(torch.exp(lse_b - lse))[..., None]
    return wb * out_a + wa * out_b, lse


def mp_lse_summed(out_a, lse_a, out_b, lse_b):
    out, _ = mp_right_logaddexp(out_a, lse_a, out_b, lse_b)
    return out, lse_a + lse_b


def mp_lse_missing_max(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    tot = wa + wb
    out = torch.nan_to_num(wa / tot)[..., None] * out_a + torch.nan_to_num(wb / tot)[..., None] \
        * out_b
    return out, torch.log(tot)


def mp_nan_on_empty(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (torch.exp(lse_a - lse)[..., None] * out_a
            + torch.exp(lse_b - lse)[..., None] * out_b, lse)


# ------------------------------------------------------------------------ ring_step (ch. 13)


def _block(q, k, v, keep=None, nan_rows=False, scale=True):
    s = q @ k.mT
    if scale:
        s = s / math.sqrt(q.shape[-1])
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1) if nan_rows else torch.nan_to_num(torch.softmax(s, -1))
    return p @ v, lse


def _merge(out, lse, out_b, lse_b, rule="lse"):
    if rule == "sum":
        return out + out_b, torch.logaddexp(lse, lse_b)
    new = torch.logaddexp(lse, lse_b)
    wa = torch.nan_to_num(torch.exp(lse - new))[..., None]
    wb = torch.nan_to_num(torch.exp(lse_b - new))[..., None]
    return wa * out + wb * out_b, new


def _ring(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world, *, src=None,
          diag=0, nan_rows=False, past=True, future=False, send="held", scale=True,
          rule="lse", polarity=False, keep_lse=False):
    source = (rank - step) % world if src is None else src(rank, step, world)
    c = q.shape[-2]
    if source == rank:
        keep = torch.ones(c, c, dtype=torch.bool).tril(diag)
        if polarity:
            keep = ~keep
        ob, lb = _block(q, k_held, v_held, keep, nan_rows, scale)
    elif (source < rank and past) or (source > rank and future):
        ob, lb = _block(q, k_held, v_held, None, nan_rows, scale)
    else:
        ob = None
    if ob is not None:
        new_out, new_lse = _merge(out, lse, ob, lb, rule)
        out, lse = new_out, (lse if keep_lse else new_lse)
    if send == "own":
        return out, lse, k_own, v_own
    return out, lse, k_held, v_held


def rs_right(*a):
    return _ring(*a)


def rs_right_inplace(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    """Updates the running out/lse in place and returns them."""
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    s = torch.einsum("bie,bje->bij", q, k_held) / q.shape[-1] ** 0.5
    if source == rank:
        c = q.shape[-2]
        s = torch.where(torch.ones(c, c, dtype=torch.bool).tril(), s, float("-inf"))
    lb = s.logsumexp(-1)
    ob = torch.exp(s - lb[..., None]) @ v_held
    new = torch.logaddexp(lse, lb)
    out.mul_(torch.exp(lse - new)[..., None]).add_(torch.exp(lb - new)[..., None] * ob)
    lse.copy_(new)
    return out, lse, k_held, v_held


def rs_diag_excludes_self_nan(*a):
    return _ring(*a, diag=-1, nan_rows=True)


def rs_diag_excludes_self_guarded(*a):
    return _ring(*a, diag=-1)


def rs_diag_unmasked(*a):
    return _ring(*a, diag=10 ** 6)


def rs_diag_triu(*a):
    return _ring(*a, polarity=True)


def rs_future_attended(*a):
    return _ring(*a, future=True)


def rs_source_plus(*a):
    return _ring(*a, src=lambda r, t, w: (r + t) % w)


def rs_sends_own(*a):
    return _ring(*a, send="own")


def rs_skips_past(*a):
    return _ring(*a, past=False)


def rs_no_scale(*a):
    return _ring(*a, scale=False)


def rs_merge_sum(*a):
    return _ring(*a, rule="sum")


def rs_lse_not_updated(*a):
    return _ring(*a, keep_lse=True)


# ---------------------------------------------------------------- multi_head_attention (ch. 4)


def _mha(x, w_qkv, w_o, num_heads, *, scale="E", heads="right", w_out=True, axis=-1,
         causal=False):
    B, L, D = x.shape
    H, E = num_heads, D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    def split(t):
        if heads == "no_transpose":
            return t.reshape(B, H, L, E)
        return t.view(B, L, H, E).permute(0, 2, 1, 3)
    q, k, v = map(split, (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(E if scale == "E" else D)
    if causal:
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, dim=axis) @ v
    o = o.reshape(B, L, D) if heads == "no_transpose" else o.permute(0, 2, 1, 3).reshape(B, L, D)
    return o @ w_o if w_out else o


def mha_right(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads)


def mha_scale_model_width(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, scale="D")


def mha_heads_not_transposed(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, heads="no_transpose")


def mha_no_output_projection(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, w_out=False)


def mha_softmax_over_queries(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, axis=-2)


def mha_causal(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, causal=True)


# ------------------------------------------------------------------------ decode_step (ch. 10)


def _dec(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, *, start=None, align="bottom_right",
         scale=True):
    P, L = k_cache.shape[-2], x.shape[-2]
    pos = P if start is None else start(P)
    q = _rope_at(x @ w_q, cos, sin, pos)
    k = torch.cat([k_cache, _rope_at(x @ w_k, cos, sin, pos)], -2)
    v = torch.cat([v_cache, x @ w_v], -2)
    s = q @ k.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(q.shape[-1])
    keep = masks.causal_mask(L, k.shape[-2], align=align)
    return _guarded_softmax(s.masked_fill(~keep, float("-inf"))) @ v, k, v


def ds_right_course_mask(*a):
    return _dec(*a)


def ds_positions_from_zero(*a):
    return _dec(*a, start=lambda P: 0)


def ds_positions_one_too_far(*a):
    return _dec(*a, start=lambda P: P + 1)


def ds_top_left(*a):
    return _dec(*a, align="top_left")


def ds_no_scale(*a):
    return _dec(*a, scale=False)


# -------------------------------------------------------------------- masked_attention (ch. 6)


def ma_right_where(q, k, v, mask):
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    s = torch.where(mask, s, float("-inf"))
    return _guarded_softmax(s) @ v


def ma_polarity(q, k, v, mask):
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    return _guarded_softmax(s.masked_fill(mask, float("-inf"))) @ v


def ma_no_guard(q, k, v, mask):
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def ma_no_scale(q, k, v, mask):
    s = q @ k.mT
    return _guarded_softmax(s.masked_fill(~mask, float("-inf"))) @ v


def ma_mask_after_softmax(q, k, v, mask):
    w = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), -1)
    return (w * mask) @ v


def ma_scale_by_keys(q, k, v, mask):
    s = (q @ k.mT) / math.sqrt(k.shape[-2])
    return _guarded_softmax(s.masked_fill(~mask, float("-inf"))) @ v


# ---------------------------------------------------------------------- self_attention (ch. 3)


def sa_right(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(torch.einsum("ble,bse->bls", q, k) * q.shape[-1] ** -0.5, -1)
    return w @ v, w


def sa_no_scale(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.mT, -1)
    return w @ v, w


def sa_scale_model_width(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.mT / math.sqrt(x.shape[-1]), -1)
    return w @ v, w


def sa_softmax_over_queries(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), 1)
    return w @ v, w


def sa_scale_divides_by_E(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.mT / q.shape[-1], -1)
    return w @ v, w


# ---------------------------------------------------------------------- scaled_scores (ch. 2)


def ss_right(q, k):
    return torch.einsum("...le,...se->...ls", q / q.shape[-1] ** 0.5, k)


def ss_by_E(q, k):
    return q @ k.mT / q.shape[-1]


def ss_no_scale(q, k):
    return q @ k.mT


def ss_times_sqrt(q, k):
    return q @ k.mT * math.sqrt(q.shape[-1])


# ---------------------------------------------------------------------------- softmax (ch. 3)


def sm_right(x, dim=-1):
    z = x - x.max(dim=dim, keepdim=True).values
    return z.exp() / z.exp().sum(dim=dim, keepdim=True)


def sm_no_shift(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def sm_last_axis_always(x, dim=-1):
    z = x - x.amax(-1, keepdim=True)
    return z.exp() / z.exp().sum(-1, keepdim=True)


def sm_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


# ---------------------------------------------------------------------- retrieve (ch. 1)


def rt_right(query, keys, values):
    return torch.softmax(keys @ query, 0) @ values


def rt_scaled(query, keys, values):
    return torch.softmax(keys @ query / query.shape[0] ** 0.5, 0) @ values


def rt_temperature_two(query, keys, values):
    return torch.softmax(keys @ query / 2, 0) @ values


# ---------------------------------------------------------------------- apply_rope (ch. 5)


def _rope(x, offset=0, base=10000.0, *, pos_shift=0, pairs="halves", expo=2.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-expo * torch.arange(E // 2, dtype=torch.float64) / E)
    pos = torch.arange(L, dtype=torch.float64) + offset + pos_shift
    ang = pos[:, None] * theta[None, :]
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    if pairs == "halves":
        x1, x2 = x[..., : E // 2], x[..., E // 2:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)


def ar_right(x, offset=0, base=10000.0):
    return _rope(x, offset, base)


def ar_offset_ignored(x, offset=0, base=10000.0):
    return _rope(x, 0, base)


def ar_positions_from_one(x, offset=0, base=10000.0):
    return _rope(x, offset, base, pos_shift=1)


def ar_interleaved(x, offset=0, base=10000.0):
    return _rope(x, offset, base, pairs="interleaved")


# ---------------------------------------------------------------------- alibi_bias (ch. 5)


def _alibi(H, L, S, *, align="bottom", sign=1.0, slope_from=1):
    slopes = 2.0 ** (-8.0 * (torch.arange(H) + slope_from) / H)
    i = torch.arange(L)[:, None] + ((S - L) if align == "bottom" else 0)
    j = torch.arange(S)[None, :]
    return (slopes[:, None, None] * sign * (j - i)).float()


def ab_right(H, L, S):
    return _alibi(H, L, S)


def ab_top_aligned(H, L, S):
    return _alibi(H, L, S, align="top")


def ab_sign_flipped(H, L, S):
    return _alibi(H, L, S, sign=-1.0)


def ab_slopes_from_zero(H, L, S):
    return _alibi(H, L, S, slope_from=0)


# ------------------------------------------------------------------- masks (ch. 6 and ch. 10)


def cm_right(n):
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def cm_upper(n):
    return torch.ones(n, n, dtype=torch.bool).triu()


def cm_strict(n):
    i = torch.arange(n)
    return i[None, :] < i[:, None]


def sw_right(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (d >= 0) & (d < window)


def sw_one_too_many(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (d >= 0) & (d <= window)


def sw_two_sided(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return d.abs() < window


# ------------------------------------------------------------------ heads (ch. 4 and ch. 10)


def rk_right(x, n_rep):
    return torch.repeat_interleave(x, repeats=n_rep, dim=1)


def rk_tiled(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)


def sh_right(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).permute(0, 2, 1, 3)


def sh_no_transpose(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)


def sh_heads_last(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)


# The expected verdicts: "pass", or the id of the diagnosis (recorded once issue 51's probes
# were written; the measurement before them counted any declared id as named).
V5: list[tuple[str, str, object]] = [
    ("mla_absorbed_step", "pass", mla_right_matmul),
    ("mla_absorbed_step", "pass", mla_right_einsum_guarded),
    ("mla_absorbed_step", "pass", mla_right_naive_scores),
    ("mla_absorbed_step", "no_position_offset", mla_positions_from_zero),
    ("mla_absorbed_step", "no_position_offset", mla_positions_from_zero_einsum),
    ("mla_absorbed_step", "positions_off_by_one", mla_positions_one_too_far),
    ("mla_absorbed_step", "wrong_scale", mla_scale_latent_rank),
    ("mla_absorbed_step", "scale_without_rope", mla_scale_nope_only_einsum),
    ("mla_absorbed_step", "no_scaling", mla_no_scale),
    ("mla_absorbed_step", "wrong_scale", mla_scale_rope_width),
    ("mla_absorbed_step", "top_left_mask", mla_top_left_where),
    ("mla_absorbed_step", "no_causal_mask", mla_no_mask),
    ("mla_absorbed_step", "rope_keys_not_rotated", mla_keys_unrotated),
    ("mla_absorbed_step", "rotation", mla_query_unrotated),
    ("mla_absorbed_step", "rotated_backwards", mla_rotated_backwards),
    ("mla_absorbed_step", "mask_excludes_self", mla_excludes_self),
    ("mla_absorbed_step", "softmax_over_queries", mla_softmax_over_queries),
    ("merge_partials", "pass", mp_right_logaddexp),
    ("merge_partials", "pass", mp_right_sigmoid),
    ("merge_partials", "no_rescale", mp_plain_sum),
    ("merge_partials", "no_rescale", mp_average),
    ("merge_partials", "keeps_larger", mp_keep_larger),
    ("merge_partials", "no_max_shift", mp_unshifted_exp),
    ("merge_partials", "weights_swapped", mp_weights_swapped),
    ("merge_partials", "lse_summed", mp_lse_summed),
    ("merge_partials", "lse_without_max", mp_lse_missing_max),
    ("merge_partials", "empty_rows_nan", mp_nan_on_empty),
    ("ring_step", "pass", rs_right),
    ("ring_step", "pass", rs_right_inplace),
    ("ring_step", "diagonal_off_by_one", rs_diag_excludes_self_nan),
    ("ring_step", "diagonal_off_by_one", rs_diag_excludes_self_guarded),
    ("ring_step", "diagonal_unmasked", rs_diag_unmasked),
    ("ring_step", "diagonal_mask_inverted", rs_diag_triu),
    ("ring_step", "future_block_attended", rs_future_attended),
    ("ring_step", "source_reversed", rs_source_plus),
    ("ring_step", "send_own", rs_sends_own),
    ("ring_step", "past_block_skipped", rs_skips_past),
    ("ring_step", "no_scaling", rs_no_scale),
    ("ring_step", "merge_no_rescale", rs_merge_sum),
    ("ring_step", "lse_not_merged", rs_lse_not_updated),
    ("multi_head_attention", "pass", mha_right),
    ("multi_head_attention", "scaled_by_D", mha_scale_model_width),
    ("multi_head_attention", "reshape_without_permute", mha_heads_not_transposed),
    ("multi_head_attention", "missing_output_projection", mha_no_output_projection),
    ("multi_head_attention", "softmax_over_queries", mha_softmax_over_queries),
    ("multi_head_attention", "causal_mask_applied", mha_causal),
    ("decode_step", "pass", ds_right_course_mask),
    ("decode_step", "no_position_offset", ds_positions_from_zero),
    ("decode_step", "positions_off_by_one", ds_positions_one_too_far),
    ("decode_step", "top_left_mask", ds_top_left),
    ("decode_step", "no_scaling", ds_no_scale),
    ("masked_attention", "pass", ma_right_where),
    ("masked_attention", "inverted_mask", ma_polarity),
    ("masked_attention", "nan_on_dead_rows", ma_no_guard),
    ("masked_attention", "no_scaling", ma_no_scale),
    ("masked_attention", "mask_after_softmax", ma_mask_after_softmax),
    ("masked_attention", "wrong_scale", ma_scale_by_keys),
    ("self_attention", "pass", sa_right),
    ("self_attention", "no_scaling", sa_no_scale),
    ("self_attention", "sqrt_of_D", sa_scale_model_width),
    ("self_attention", "wrong_axis", sa_softmax_over_queries),
    ("self_attention", "wrong_scale", sa_scale_divides_by_E),
    ("scaled_scores", "pass", ss_right),
    ("scaled_scores", "divide_by_E", ss_by_E),
    ("scaled_scores", "no_scaling", ss_no_scale),
    ("scaled_scores", "times_sqrt_E", ss_times_sqrt),
    ("softmax", "pass", sm_right),
    ("softmax", "not_stable", sm_no_shift),
    ("softmax", "ignores_dim", sm_last_axis_always),
    ("softmax", "global_max", sm_global_max),
    ("retrieve", "pass", rt_right),
    ("retrieve", "scaled", rt_scaled),
    ("retrieve", "wrong_scale", rt_temperature_two),
    ("apply_rope", "pass", ar_right),
    ("apply_rope", "forgot_offset", ar_offset_ignored),
    ("apply_rope", "positions_off_by_one", ar_positions_from_one),
    ("apply_rope", "adjacent_pairs", ar_interleaved),
    ("alibi_bias", "pass", ab_right),
    ("alibi_bias", "top_left_alignment", ab_top_aligned),
    ("alibi_bias", "wrong_sign", ab_sign_flipped),
    ("alibi_bias", "slopes_from_zero", ab_slopes_from_zero),
    ("causal_mask", "pass", cm_right),
    ("causal_mask", "upper_triangle", cm_upper),
    ("causal_mask", "strict", cm_strict),
    ("sliding_window_mask", "pass", sw_right),
    ("sliding_window_mask", "off_by_one", sw_one_too_many),
    ("sliding_window_mask", "not_causal", sw_two_sided),
    ("repeat_kv", "pass", rk_right),
    ("repeat_kv", "tiled", rk_tiled),
    ("split_heads", "pass", sh_right),
    ("split_heads", "reshape_without_permute", sh_no_transpose),
    ("split_heads", "wrong_head_order", sh_heads_last),
]
