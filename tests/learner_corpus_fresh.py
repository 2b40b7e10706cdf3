"""A fresh set of learners' submissions for issue 39 (chapters 1-7, 10-12).

Written from each chapter's text and each exercise's signature, title and hints, *before*
reading the exercise's declared mistakes: the slips real learners make (off-by-one masks, wrong
dims, transposes, a missing scale, float32 where float64 is needed, a forgotten append, ``<``
for ``<=``, swapped bands...), and a few right answers in unusual styles.

``FRESH`` lists ``(exercise id, verdict, function)``: the verdict is ``"pass"`` or the id of the
declared mistake the check must report. Used by ``test_exercises_fresh_corpus.py``.

Measured when it was written (seed 0, in-process): 142 wrong submissions, 91 of them named by a
declared mistake with the declarations of the time (64%); 139 after issue 39 added and repaired
mistakes (98%; the 3 left raise an error on every failing case, which names nothing).
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from course_lib.attention import masks

# ------------------------------------------------------------------------- retrieve (ch. 1)


def rt_right_manual(query, keys, values):
    s = (keys * query).sum(-1)
    e = torch.exp(s - s.max())
    return (e / e.sum()) @ values


def rt_right_einsum(query, keys, values):
    w = torch.softmax(torch.einsum("se,e->s", keys, query), dim=0)
    return torch.einsum("s,sv->v", w, values)


def rt_scaled(query, keys, values):
    w = torch.softmax(keys @ query / math.sqrt(query.shape[0]), dim=-1)
    return w @ values


def rt_no_softmax(query, keys, values):
    return (keys @ query) @ values


def rt_sum_normalised(query, keys, values):
    s = keys @ query
    return (s / s.sum()) @ values


def rt_hard_argmax(query, keys, values):
    return values[torch.argmax(keys @ query)]


def rt_mean_of_weighted(query, keys, values):
    w = torch.softmax(keys @ query, dim=0)
    return (w[:, None] * values).mean(dim=0)


def rt_cosine(query, keys, values):
    qn = query / query.norm()
    kn = keys / keys.norm(dim=-1, keepdim=True)
    return torch.softmax(kn @ qn, dim=-1) @ values


# -------------------------------------------------------------------- scaled_scores (ch. 2)


def ss_right_einsum(q, k):
    return torch.einsum("...le,...se->...ls", q, k) * q.shape[-1] ** -0.5


def ss_right_mT(q, k):
    return (q / math.sqrt(q.size(-1))) @ k.mT


def ss_divide_by_E(q, k):
    return q @ k.transpose(-2, -1) / q.shape[-1]


def ss_sqrt_of_S(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])


def ss_no_scale(q, k):
    return torch.matmul(q, k.transpose(-1, -2))


def ss_times_sqrt(q, k):
    return q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1])


def ss_sqrt_of_L(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-2])


def ss_transpose_first_two(q, k):
    return q @ k.transpose(0, 1) / math.sqrt(q.shape[-1])


# ------------------------------------------------------------------------- softmax (ch. 3)


def sm_right_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def sm_right_loop_free_max(x, dim=-1):
    shifted = x - torch.max(x, dim, keepdim=True)[0]
    num = shifted.exp()
    return num / num.sum(dim, keepdim=True)


def sm_no_shift(x, dim=-1):
    e = torch.exp(x)
    return e / torch.sum(e, dim=dim, keepdim=True)


def sm_ignores_dim(x, dim=-1):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def sm_global_max_shift(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def sm_min_shift(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def sm_returns_double(x, dim=-1):
    x = x.double()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def sm_sum_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


# ------------------------------------------------------------------ self_attention (ch. 3)


def sa_right_bmm(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = torch.bmm(q, k.transpose(1, 2)) / q.shape[-1] ** 0.5
    s = s - s.amax(-1, keepdim=True)
    w = s.exp() / s.exp().sum(-1, keepdim=True)
    return torch.bmm(w, v), w


def sa_no_scale(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return w @ v, w


def sa_scale_by_D(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
    return w @ v, w


def sa_softmax_over_queries(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=1)
    return w @ v, w


def sa_keys_times_queries(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w


def sa_swapped_outputs(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w, w @ v


def sa_unstable_softmax(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    w = s / s.sum(-1, keepdim=True)
    return w @ v, w


# --------------------------------------------------------------------- split_heads (ch. 4)


def sh_right_chunk_stack(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def sh_right_via_transpose(x, num_heads):
    B, L, D = x.shape
    return x.transpose(1, 2).reshape(B, num_heads, D // num_heads, L).transpose(2, 3)


def sh_reshape_only(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)


def sh_interleaved(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)


def sh_interleaved_view(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, -1, num_heads).transpose(1, 3).transpose(2, 3)


def sh_split_size_not_count(x, num_heads):
    return torch.stack(x.split(num_heads, dim=-1), dim=1)


def sh_reshape_twice(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).reshape(B, num_heads, L, D // num_heads)


# --------------------------------------------------------------------- merge_heads (ch. 4)


def mh_right_cat(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=-1)


def mh_right_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def mh_reshape_only(x):
    B, H, L, E = x.shape
    return x.reshape(B, L, H * E)


def mh_feature_major(x):
    B, H, L, E = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * E)


def mh_cat_on_tokens(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)


def mh_view_after_transpose(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).view(B, L, H * E)


def mh_swap_wrong_axes(x):
    B, H, L, E = x.shape
    return x.transpose(2, 3).reshape(B, L, H * E)


# ------------------------------------------------------------ multi_head_attention (ch. 4)


def _mha(x, w_qkv, w_o, H, *, scale_width=None, split=None, merge=None, use_o=True, dim=-1,
         qkv=None):
    B, L, D = x.shape
    E = D // H
    if qkv is None:
        q, k, v = (x @ w_qkv).split(D, dim=-1)
    else:
        q, k, v = qkv(x @ w_qkv, B, L, H, E)
    split = split or (lambda t: t.reshape(B, L, H, E).transpose(1, 2))
    q, k, v = split(q), split(k), split(v)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(scale_width or E), dim=dim)
    o = w @ v
    o = merge(o) if merge else o.transpose(1, 2).reshape(B, L, D)
    return o @ w_o if use_o else o


def mha_right_einsum(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = (x @ w_qkv).reshape(B, L, 3, num_heads, E)
    q, k, v = qkv.unbind(2)
    s = torch.einsum("blhe,bmhe->bhlm", q, k) / math.sqrt(E)
    w = torch.softmax(s, -1)
    o = torch.einsum("bhlm,bmhe->blhe", w, v).reshape(B, L, D)
    return o @ w_o


def mha_scale_by_D(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, scale_width=x.shape[-1])


def mha_split_no_transpose(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    return _mha(x, w_qkv, w_o, num_heads,
                split=lambda t: t.reshape(B, num_heads, L, D // num_heads))


def mha_forgot_w_o(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, use_o=False)


def mha_merge_no_transpose(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    return _mha(x, w_qkv, w_o, num_heads, merge=lambda o: o.reshape(B, L, D))


def mha_softmax_dim_minus_2(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, dim=-2)


def mha_per_head_interleaved_qkv(x, w_qkv, w_o, num_heads):
    def qkv(t, B, L, H, E):
        t = t.reshape(B, L, H, 3 * E)
        q, k, v = t.split(E, dim=-1)
        return q.reshape(B, L, H * E), k.reshape(B, L, H * E), v.reshape(B, L, H * E)
    return _mha(x, w_qkv, w_o, num_heads, qkv=qkv)


# ---------------------------------------------------------------------- apply_rope (ch. 5)


def _rope_angles(x, offset, base, *, dtype=torch.float64, two=2.0, use_offset=True):
    L, E = x.shape[-2:]
    i = torch.arange(E // 2, dtype=dtype)
    theta = base ** (-two * i / E)
    start = offset if use_offset else 0
    pos = torch.arange(start, start + L, dtype=dtype)
    return pos[:, None] * theta[None, :]


def rope_right_polar(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base)
    x1, x2 = x[..., : E // 2].double(), x[..., E // 2:].double()
    c, s = ang.cos(), ang.sin()
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


def rope_right_complex(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base)
    z = torch.complex(x[..., : E // 2].double(), x[..., E // 2:].double())
    z = z * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def rope_interleaved_pairs(x, offset=0, base=10000.0):
    ang = _rope_angles(x, offset, base)
    xe, xo = x[..., 0::2].double(), x[..., 1::2].double()
    c, s = ang.cos(), ang.sin()
    out = torch.stack([xe * c - xo * s, xe * s + xo * c], dim=-1).flatten(-2)
    return out.to(x.dtype)


def rope_no_offset(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base, use_offset=False)
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def rope_rotate_half_sign(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base)
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return (x * cos + torch.cat([x2, -x1], -1) * sin).to(x.dtype)


def rope_theta_without_two(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base, two=1.0)
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def rope_float32_angles(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base, dtype=torch.float32)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rope_repeat_interleave_tables(x, offset=0, base=10000.0):
    E = x.shape[-1]
    ang = _rope_angles(x, offset, base)
    cos = ang.cos().repeat_interleave(2, dim=-1)
    sin = ang.sin().repeat_interleave(2, dim=-1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


# ---------------------------------------------------------------------- alibi_bias (ch. 5)


def _alibi(H, L, S, *, slopes=None, rel=None):
    h = torch.arange(H, dtype=torch.float32)
    m = 2.0 ** (-8.0 * (h + 1) / H) if slopes is None else slopes(h)
    i = torch.arange(L)[:, None] + (S - L)
    j = torch.arange(S)[None, :]
    d = (j - i) if rel is None else rel(i, j, L, S)
    return (m[:, None, None] * d.float()).float()


def ab_right_loop(H, L, S):
    out = torch.empty(H, L, S)
    for h in range(H):
        slope = 2 ** (-8 * (h + 1) / H)
        for i in range(L):
            for j in range(S):
                out[h, i, j] = slope * (j - (i + S - L))
    return out


def ab_slopes_from_zero(H, L, S):
    return _alibi(H, L, S, slopes=lambda h: 2.0 ** (-8.0 * h / H))


def ab_top_left(H, L, S):
    return _alibi(H, L, S, rel=lambda i, j, L, S: j - torch.arange(L)[:, None])


def ab_sign_flipped(H, L, S):
    return _alibi(H, L, S, rel=lambda i, j, L, S: i - j)


def ab_absolute_distance(H, L, S):
    return _alibi(H, L, S, rel=lambda i, j, L, S: -(j - i).abs())


def ab_slopes_reversed(H, L, S):
    return _alibi(H, L, S, slopes=lambda h: 2.0 ** (-8.0 * (H - h) / H))


def ab_masks_future(H, L, S):
    b = _alibi(H, L, S)
    i = torch.arange(L)[:, None] + (S - L)
    j = torch.arange(S)[None, :]
    return b.masked_fill(j > i, float("-inf"))


# ---------------------------------------------------------------- llama3_frequencies (ch. 5)


def ll_right_where(E, base, factor, low_freq_factor, high_freq_factor,
                   original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = 1.0 / base ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
    wl = 2 * math.pi / theta
    out = torch.where(wl > M / low_freq_factor, theta / factor, theta)
    a = (M / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (wl >= M / high_freq_factor) & (wl <= M / low_freq_factor)
    return torch.where(mid, (1 - a) * theta / factor + a * theta, out)


def ll_right_python_loop(E, base, factor, low_freq_factor, high_freq_factor,
                         original_max_position_embeddings):
    M = original_max_position_embeddings
    res = []
    for i in range(E // 2):
        th = base ** (-2 * i / E)
        turns = M * th / (2 * math.pi)
        if turns > high_freq_factor:
            res.append(th)
        elif turns < low_freq_factor:
            res.append(th / factor)
        else:
            a = (turns - low_freq_factor) / (high_freq_factor - low_freq_factor)
            res.append((1 - a) * th / factor + a * th)
    return torch.tensor(res, dtype=torch.float64)


def ll_float32_hf_order(E, base, factor, low_freq_factor, high_freq_factor,
                        original_max_position_embeddings):
    # written the way the Hugging Face code reads: float32 frequencies, then a cast at the end
    inv = 1.0 / (base ** (torch.arange(0, E, 2, dtype=torch.int64).float() / E))
    low_wl = original_max_position_embeddings / low_freq_factor
    high_wl = original_max_position_embeddings / high_freq_factor
    wl = 2 * math.pi / inv
    scaled = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (original_max_position_embeddings / wl - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, scaled).double()


def ll_float32_everything_clamp(E, base, factor, low_freq_factor, high_freq_factor,
                                original_max_position_embeddings):
    theta = base ** (-torch.arange(0, E, 2).float() / E)
    turns = original_max_position_embeddings * theta / (2 * math.pi)
    a = ((turns - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return ((1 - a) * theta / factor + a * theta).to(torch.float64)


def ll_float32_theta(E, base, factor, low_freq_factor, high_freq_factor,
                     original_max_position_embeddings):
    theta = (1.0 / base ** (torch.arange(0, E, 2, dtype=torch.float32) / E)).double()
    M = original_max_position_embeddings
    a = ((M * theta / (2 * math.pi) - low_freq_factor)
         / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return (1 - a) * theta / factor + a * theta


def ll_swapped_bands_where(E, base, factor, low_freq_factor, high_freq_factor,
                           original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    wl = 2 * math.pi / theta
    out = torch.where(wl < M / high_freq_factor, theta / factor, theta)
    a = (M / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (wl >= M / high_freq_factor) & (wl <= M / low_freq_factor)
    return torch.where(mid, (1 - a) * theta / factor + a * theta, out)


def ll_swapped_bands_loop(E, base, factor, low_freq_factor, high_freq_factor,
                          original_max_position_embeddings):
    M = original_max_position_embeddings
    res = []
    for i in range(E // 2):
        th = base ** (-2 * i / E)
        wl = 2 * math.pi / th
        if wl < M / high_freq_factor:
            res.append(th / factor)
        elif wl > M / low_freq_factor:
            res.append(th)
        else:
            a = (M / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
            res.append((1 - a) * th / factor + a * th)
    return torch.tensor(res, dtype=torch.float64)


def ll_no_blend_keep(E, base, factor, low_freq_factor, high_freq_factor,
                     original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    wl = 2 * math.pi / theta
    return torch.where(wl > M / low_freq_factor, theta / factor, theta)


def ll_no_blend_divide(E, base, factor, low_freq_factor, high_freq_factor,
                       original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    wl = 2 * math.pi / theta
    return torch.where(wl < M / high_freq_factor, theta, theta / factor)


def ll_blend_reversed(E, base, factor, low_freq_factor, high_freq_factor,
                      original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    a = ((M * theta / (2 * math.pi) - low_freq_factor)
         / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return a * theta / factor + (1 - a) * theta


def ll_wavelength_without_2pi(E, base, factor, low_freq_factor, high_freq_factor,
                              original_max_position_embeddings):
    M = original_max_position_embeddings
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    wl = 1 / theta
    a = ((M / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return (1 - a) * theta / factor + a * theta


# --------------------------------------------------------------------- causal_mask (ch. 6)


def cm_right_compare(n):
    r = torch.arange(n)
    return r.unsqueeze(1) >= r.unsqueeze(0)


def cm_right_not_triu(n):
    return ~torch.ones(n, n, dtype=torch.bool).triu(1)


def cm_upper(n):
    return torch.ones(n, n, dtype=torch.bool).triu()


def cm_strict(n):
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=-1)


def cm_float(n):
    return torch.tril(torch.ones(n, n))


def cm_transposed_compare(n):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return i <= j


def cm_masked_positions(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def cm_strict_via_not(n):
    return ~torch.ones(n, n, dtype=torch.bool).triu()


# -------------------------------------------------------------------- padding_mask (ch. 6)


def pm_right_unsqueeze(tokens, pad_id=0):
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(1)


def pm_inverted(tokens, pad_id=0):
    return (tokens == pad_id)[:, None, None, :]


def pm_three_dims(tokens, pad_id=0):
    return (tokens != pad_id)[:, None, :]


def pm_query_axis(tokens, pad_id=0):
    return (tokens != pad_id)[:, None, :, None]


def pm_hardcoded_zero(tokens, pad_id=0):
    return (tokens != 0).view(tokens.shape[0], 1, 1, -1)


def pm_positive_tokens(tokens, pad_id=0):
    return (tokens > 0)[:, None, None, :]


def pm_float(tokens, pad_id=0):
    return (tokens != pad_id).float()[:, None, None, :]


# ---------------------------------------------------------------- masked_attention (ch. 6)


def ma_right_renormalise(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s - s.amax(-1, keepdim=True)
    e = s.exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30) @ v


def ma_right_nan_to_num(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return w @ v


def _ma(q, k, v, mask, *, fill=float("-inf"), invert=False, scale=True, guard=True):
    s = q @ k.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(q.shape[-1])
    s = s.masked_fill(mask if invert else ~mask, fill)
    m = s.amax(-1, keepdim=True)
    if guard:
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    tot = e.sum(-1, keepdim=True)
    if guard:
        tot = torch.where(tot == 0, torch.ones_like(tot), tot)
    return e / tot @ v


def ma_fill_zero(q, k, v, mask):
    return _ma(q, k, v, mask, fill=0.0)


def ma_inverted(q, k, v, mask):
    return _ma(q, k, v, mask, invert=True)


def ma_no_guard(q, k, v, mask):
    return _ma(q, k, v, mask, guard=False)


def ma_big_negative(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~mask, -1e9), dim=-1) @ v


def ma_zero_weights_after_softmax(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return (torch.softmax(s, dim=-1) * mask) @ v


def ma_no_scale(q, k, v, mask):
    return _ma(q, k, v, mask, scale=False)


# ------------------------------------------------------------------- complexity (ch. 7)


def af_right(n, d):
    return 2 * (2 * n * n * d)


def af_one_product(n, d):
    return 2 * n * n * d


def af_macs(n, d):
    return n * n * d


def af_float(n, d):
    return 4.0 * n ** 2 * d


def af_softmax_counted(n, d):
    return 4 * n * n * d + n * n


def af_dims_confused(n, d):
    return 4 * n * d * d


def am_right(n, heads=1, bytes_per_element=4):
    return n ** 2 * heads * bytes_per_element


def am_forgot_heads(n, heads=1, bytes_per_element=4):
    return n * n * bytes_per_element


def am_elements(n, heads=1, bytes_per_element=4):
    return heads * n * n


def am_bits(n, heads=1, bytes_per_element=4):
    return heads * n * n * bytes_per_element * 8


def am_scores_and_weights(n, heads=1, bytes_per_element=4):
    return 2 * heads * n * n * bytes_per_element


def am_linear(n, heads=1, bytes_per_element=4):
    return heads * n * bytes_per_element


def lf_right(n, d_model):
    projections = 4 * (2 * n * d_model * d_model)
    core = 2 * (2 * n * n * d_model)
    return projections + core


def lf_forgot_output_projection(n, d_model):
    return 3 * 2 * n * d_model ** 2 + 4 * n * n * d_model


def lf_macs(n, d_model):
    return 4 * n * d_model ** 2 + 2 * n * n * d_model


def lf_one_core_product(n, d_model):
    return 8 * n * d_model ** 2 + 2 * n * n * d_model


def lf_fused_qkv_once(n, d_model):
    return 2 * (2 * n * d_model * d_model) + 4 * n * n * d_model


def lf_float(n, d_model):
    return 8 * n * d_model ** 2 + 4 * n ** 2 * d_model / 1


# ------------------------------------------------------------------ decode_step (ch. 10)


def _rot(t, cos, sin):
    h = t.shape[-1] // 2
    return t * cos + torch.cat([-t[..., h:], t[..., :h]], -1) * sin


def ds_right_explicit(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    c, s = cos[P:P + L], sin[P:P + L]
    q, k = _rot(x @ w_q, c, s), _rot(x @ w_k, c, s)
    k_all = torch.cat([k_cache, k], 1)
    v_all = torch.cat([v_cache, x @ w_v], 1)
    S = P + L
    scores = q @ k_all.transpose(1, 2) / math.sqrt(q.shape[-1])
    keep = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + P
    w = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    return w @ v_all, k_all, v_all


def _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, *, rows=None, rotate_k=True,
        rotate_v=False, diag=None, mask=True, cache_rotated=True, rot=_rot):
    P, L = k_cache.shape[1], x.shape[1]
    a, b = (P, P + L) if rows is None else rows(P, L)
    c, s = cos[a:b], sin[a:b]
    q = rot(x @ w_q, c, s)
    k_raw = x @ w_k
    k = rot(k_raw, c, s) if rotate_k else k_raw
    v = x @ w_v
    if rotate_v:
        v = rot(v, c, s)
    k_all = torch.cat([k_cache, k], dim=1)
    v_all = torch.cat([v_cache, v], dim=1)
    S = k_all.shape[1]
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask:
        d = S - L if diag is None else diag(P, L, S)
        allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=d)
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v_all
    if not cache_rotated:
        k_all = torch.cat([k_cache, k_raw], dim=1)
    return out, k_all, v_all


def ds_attend_old_cache_only(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    # attends before appending: the mask is built from the cache's shape
    P, L = k_cache.shape[1], x.shape[1]
    c, s = cos[P:P + L], sin[P:P + L]
    q, k = _rot(x @ w_q, c, s), _rot(x @ w_k, c, s)
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, P, dtype=torch.bool).tril(diagonal=P - L)
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    out = w @ v_cache
    return out, torch.cat([k_cache, k], 1), torch.cat([v_cache, x @ w_v], 1)


def ds_mask_from_old_cache_length(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    # S read off the cache before the append, then used for the diagonal
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, diag=lambda P, L, S: P - L)


def ds_key_not_rotated(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, rotate_k=False)


def ds_rows_from_zero(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, rows=lambda P, L: (0, L))


def ds_top_left_mask(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, diag=lambda P, L, S: 0)


def ds_no_mask(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, mask=False)


def ds_values_rotated(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, rotate_v=True)


def ds_cache_keeps_unrotated_keys(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, cache_rotated=False)


def ds_rotate_half_sign(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    def rot(t, c, s):
        h = t.shape[-1] // 2
        return t * c + torch.cat([t[..., h:], -t[..., :h]], -1) * s
    return _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, rot=rot)


# -------------------------------------------------------------------- repeat_kv (ch. 10)


def rk_right_index(x, n_rep):
    idx = torch.arange(x.shape[1] * n_rep) // n_rep
    return x[:, idx]


def rk_right_expand(x, n_rep):
    B, H, S, E = x.shape
    return x.unsqueeze(2).expand(B, H, n_rep, S, E).flatten(1, 2)


def rk_tiled_repeat(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def rk_tiled_cat(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)


def rk_tiled_expand(x, n_rep):
    B, H, S, E = x.shape
    return x[:, None].expand(B, n_rep, H, S, E).reshape(B, n_rep * H, S, E)


def rk_interleave_sequence(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)


def rk_interleave_batch(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=0)


# ---------------------------------------------------------------- sliding_window_mask (ch. 10)


def sw_right_tril_triu(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ones.triu(-(window - 1))


def sw_right_distance(n, window):
    d = torch.arange(n).view(-1, 1) - torch.arange(n).view(1, -1)
    return (d >= 0) & (d < window)


def sw_one_too_many(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (j >= i - window)


def sw_symmetric(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (i - j).abs() < window


def sw_not_causal(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return j > i - window


def sw_excludes_itself(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j < i) & (j >= i - window)


def sw_tril_triu_off_by_one(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-window)


# ---------------------------------------------------------------- kv_cache_bytes (ch. 10)


def kb_right_itemsize(tokens, layers, heads, kv_heads, head_dim, dtype):
    return tokens * layers * 2 * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def kb_query_heads(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * heads * head_dim * dtype.itemsize * tokens


def kb_keys_only(tokens, layers, heads, kv_heads, head_dim, dtype):
    return layers * kv_heads * head_dim * dtype.itemsize * tokens


def kb_bits(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * torch.finfo(dtype).bits * tokens


def kb_fp16_hardcoded(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * 2 * tokens


def kb_float_division(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * (torch.finfo(dtype).bits / 8) * tokens


# ------------------------------------------------------------ document_attention (ch. 11)


def _doc_ids(lengths):
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def _flex_with(q, k, v, mod):
    L = q.shape[-2]
    return flex_attention(q, k, v, block_mask=create_block_mask(mod, None, None, L, L,
                                                                device="cpu"))


def da_right_searchsorted(q, k, v, lengths):
    doc = torch.searchsorted(lengths.cumsum(0), torch.arange(q.shape[-2]), right=True)

    def mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    return _flex_with(q, k, v, mod)


def da_right_dense(q, k, v, lengths):
    doc = _doc_ids(lengths)
    L = q.shape[-2]
    pos = torch.arange(L)
    allowed = (doc[:, None] == doc[None, :]) & (pos[None, :] <= pos[:, None])
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


def da_strictly_earlier(q, k, v, lengths):
    doc = _doc_ids(lengths)

    def mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (kv_idx < q_idx)
    return _flex_with(q, k, v, mod)


def da_strictly_earlier_dense(q, k, v, lengths):
    doc = _doc_ids(lengths)
    L = q.shape[-2]
    pos = torch.arange(L)
    allowed = (doc[:, None] == doc[None, :]) & (pos[None, :] < pos[:, None])
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return w @ v


def da_no_causal(q, k, v, lengths):
    doc = _doc_ids(lengths)
    return _flex_with(q, k, v, lambda b, h, q_idx, kv_idx: doc[q_idx] == doc[kv_idx])


def da_causal_only(q, k, v, lengths):
    return _flex_with(q, k, v, lambda b, h, q_idx, kv_idx: kv_idx <= q_idx)


def da_searchsorted_left(q, k, v, lengths):
    doc = torch.searchsorted(lengths.cumsum(0), torch.arange(q.shape[-2]))

    def mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)
    return _flex_with(q, k, v, mod)


def da_future_of_document(q, k, v, lengths):
    doc = _doc_ids(lengths)

    def mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (kv_idx >= q_idx)
    return _flex_with(q, k, v, mod)


# ------------------------------------------------------------- softcap_attention (ch. 11)


def sc_right_dense(q, k, v, cap):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(cap * torch.tanh(s / cap), dim=-1) @ v


def sc_right_flex(q, k, v, cap):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: torch.tanh(s / cap) * cap)


def sc_tanh_times_cap(q, k, v, cap):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: cap * torch.tanh(s))


def sc_no_multiply_back(q, k, v, cap):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: torch.tanh(s / cap))


def sc_cap_before_scaling(q, k, v, cap):
    s = cap * torch.tanh((q @ k.transpose(-2, -1)) / cap)
    return torch.softmax(s / math.sqrt(q.shape[-1]), dim=-1) @ v


def sc_hard_clamp(q, k, v, cap):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s.clamp(-cap, cap))


def sc_unscaled_scores(q, k, v, cap):
    s = q @ k.transpose(-2, -1)
    return torch.softmax(cap * torch.tanh(s / cap), dim=-1) @ v


# -------------------------------------------------------------- induction_score (ch. 12)


def is_right_diagonal(attn, period):
    return attn.diagonal(offset=1 - period)[1:].mean().item()


def is_right_loop(attn, period):
    n = attn.shape[0]
    return sum(float(attn[i, i - period + 1]) for i in range(period, n)) / (n - period)


def is_same_token(attn, period):
    rows = torch.arange(period, attn.shape[0])
    return attn[rows, rows - period].mean().item()


def is_diagonal_extra_row(attn, period):
    return attn.diagonal(offset=-(period - 1)).mean().item()


def is_sum(attn, period):
    rows = torch.arange(period, attn.shape[0])
    return attn[rows, rows - period + 1].sum().item()


def is_transposed(attn, period):
    rows = torch.arange(period, attn.shape[0])
    return attn[rows - period + 1, rows].mean().item()


def is_divide_by_n(attn, period):
    rows = torch.arange(period, attn.shape[0])
    return (attn[rows, rows - period + 1].sum() / attn.shape[0]).item()


def is_previous_token(attn, period):
    rows = torch.arange(period, attn.shape[0])
    return attn[rows, rows - 1].mean().item()


# ----------------------------------------------------------------- causal_block (ch. 12)


def cb_right_is_causal(x, attn, ln1, ln2, mlp):
    h = x + attn(ln1(x), is_causal=True)
    return h + mlp(ln2(h))


def cb_right_explicit_mask(x, attn, ln1, ln2, mlp):
    L = x.shape[1]
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    y = attn(ln1(x), attn_mask=mask)
    x = x + y
    return x + mlp(ln2(x))


def cb_post_norm(x, attn, ln1, ln2, mlp):
    mask = masks.causal_mask(x.shape[-2])
    x = ln1(x + attn(x, attn_mask=mask))
    return ln2(x + mlp(x))


def cb_inverted_mask(x, attn, ln1, ln2, mlp):
    mask = ~masks.causal_mask(x.shape[-2])
    x = x + attn(ln1(x), attn_mask=mask)
    return x + mlp(ln2(x))


def cb_no_mask(x, attn, ln1, ln2, mlp):
    x = x + attn(ln1(x))
    return x + mlp(ln2(x))


def cb_mlp_on_input(x, attn, ln1, ln2, mlp):
    mask = masks.causal_mask(x.shape[-2])
    return x + attn(ln1(x), attn_mask=mask) + mlp(ln2(x))


def cb_no_mlp_residual(x, attn, ln1, ln2, mlp):
    mask = masks.causal_mask(x.shape[-2])
    x = x + attn(ln1(x), attn_mask=mask)
    return mlp(ln2(x))


def cb_ln1_twice(x, attn, ln1, ln2, mlp):
    mask = masks.causal_mask(x.shape[-2])
    x = x + attn(ln1(x), attn_mask=mask)
    return x + mlp(ln1(x))


def cb_triu_mask(x, attn, ln1, ln2, mlp):
    L = x.shape[-2]
    future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    x = x + attn(ln1(x), attn_mask=future)
    return x + mlp(ln2(x))


# --------------------------------------------------------------------------- the list

FRESH = [
    ("retrieve", "pass", rt_right_manual),
    ("retrieve", "pass", rt_right_einsum),
    ("retrieve", "scaled", rt_scaled),
    ("retrieve", "no_softmax", rt_no_softmax),
    ("retrieve", "normalised_without_exp", rt_sum_normalised),
    ("retrieve", "hard_argmax", rt_hard_argmax),
    ("retrieve", "mean_not_sum", rt_mean_of_weighted),
    ("retrieve", "cosine_similarity", rt_cosine),
    ("scaled_scores", "pass", ss_right_einsum),
    ("scaled_scores", "pass", ss_right_mT),
    ("scaled_scores", "divide_by_E", ss_divide_by_E),
    ("scaled_scores", "sqrt_of_S", ss_sqrt_of_S),
    ("scaled_scores", "no_scaling", ss_no_scale),
    ("scaled_scores", "times_sqrt_E", ss_times_sqrt),
    ("scaled_scores", "sqrt_of_L", ss_sqrt_of_L),
    ("scaled_scores", "raised", ss_transpose_first_two),
    ("softmax", "pass", sm_right_logsumexp),
    ("softmax", "pass", sm_right_loop_free_max),
    ("softmax", "not_stable", sm_no_shift),
    ("softmax", "ignores_dim", sm_ignores_dim),
    ("softmax", "global_max", sm_global_max_shift),
    ("softmax", "min_shift", sm_min_shift),
    ("softmax", "dtype_not_kept", sm_returns_double),
    ("softmax", "raised", sm_sum_no_keepdim),
    ("self_attention", "pass", sa_right_bmm),
    ("self_attention", "no_scaling", sa_no_scale),
    ("self_attention", "sqrt_of_D", sa_scale_by_D),
    ("self_attention", "wrong_axis", sa_softmax_over_queries),
    ("self_attention", "scores_transposed", sa_keys_times_queries),
    ("self_attention", "swapped_outputs", sa_swapped_outputs),
    ("self_attention", "unstable_softmax", sa_unstable_softmax),
    ("split_heads", "pass", sh_right_chunk_stack),
    ("split_heads", "pass", sh_right_via_transpose),
    ("split_heads", "reshape_without_permute", sh_reshape_only),
    ("split_heads", "wrong_head_order", sh_interleaved),
    ("split_heads", "wrong_head_order", sh_interleaved_view),
    ("split_heads", "count_as_width", sh_split_size_not_count),
    ("split_heads", "reshape_without_permute", sh_reshape_twice),
    ("merge_heads", "pass", mh_right_cat),
    ("merge_heads", "pass", mh_right_flatten),
    ("merge_heads", "reshape_without_permute", mh_reshape_only),
    ("merge_heads", "wrong_head_order", mh_feature_major),
    ("merge_heads", "along_tokens", mh_cat_on_tokens),
    ("merge_heads", "view_of_non_contiguous", mh_view_after_transpose),
    ("merge_heads", "transposed_wrong_axes", mh_swap_wrong_axes),
    ("multi_head_attention", "pass", mha_right_einsum),
    ("multi_head_attention", "scaled_by_D", mha_scale_by_D),
    ("multi_head_attention", "reshape_without_permute", mha_split_no_transpose),
    ("multi_head_attention", "missing_output_projection", mha_forgot_w_o),
    ("multi_head_attention", "reshape_without_permute", mha_merge_no_transpose),
    ("multi_head_attention", "softmax_over_queries", mha_softmax_dim_minus_2),
    ("multi_head_attention", "qkv_per_head", mha_per_head_interleaved_qkv),
    ("apply_rope", "pass", rope_right_polar),
    ("apply_rope", "pass", rope_right_complex),
    ("apply_rope", "adjacent_pairs", rope_interleaved_pairs),
    ("apply_rope", "forgot_offset", rope_no_offset),
    ("apply_rope", "rotated_backwards", rope_rotate_half_sign),
    ("apply_rope", "exponent_i_over_E", rope_theta_without_two),
    ("apply_rope", "float32_angles", rope_float32_angles),
    ("apply_rope", "mixed_layouts", rope_repeat_interleave_tables),
    ("alibi_bias", "pass", ab_right_loop),
    ("alibi_bias", "slopes_from_zero", ab_slopes_from_zero),
    ("alibi_bias", "top_left_alignment", ab_top_left),
    ("alibi_bias", "wrong_sign", ab_sign_flipped),
    ("alibi_bias", "symmetric_distance", ab_absolute_distance),
    ("alibi_bias", "slopes_reversed", ab_slopes_reversed),
    ("alibi_bias", "masked_future", ab_masks_future),
    ("llama3_frequencies", "pass", ll_right_where),
    ("llama3_frequencies", "pass", ll_right_python_loop),
    ("llama3_frequencies", "computed_in_float32", ll_float32_hf_order),
    ("llama3_frequencies", "computed_in_float32", ll_float32_everything_clamp),
    ("llama3_frequencies", "computed_in_float32", ll_float32_theta),
    ("llama3_frequencies", "high_frequencies_scaled", ll_swapped_bands_where),
    ("llama3_frequencies", "high_frequencies_scaled", ll_swapped_bands_loop),
    ("llama3_frequencies", "no_blend", ll_no_blend_keep),
    ("llama3_frequencies", "no_blend", ll_no_blend_divide),
    ("llama3_frequencies", "high_frequencies_scaled", ll_blend_reversed),
    ("llama3_frequencies", "wavelength_without_2pi", ll_wavelength_without_2pi),
    ("causal_mask", "pass", cm_right_compare),
    ("causal_mask", "pass", cm_right_not_triu),
    ("causal_mask", "upper_triangle", cm_upper),
    ("causal_mask", "strict", cm_strict),
    ("causal_mask", "not_bool", cm_float),
    ("causal_mask", "upper_triangle", cm_transposed_compare),
    ("causal_mask", "inverted", cm_masked_positions),
    ("causal_mask", "strict", cm_strict_via_not),
    ("padding_mask", "pass", pm_right_unsqueeze),
    ("padding_mask", "inverted", pm_inverted),
    ("padding_mask", "missing_axes", pm_three_dims),
    ("padding_mask", "masks_queries", pm_query_axis),
    ("padding_mask", "hardcoded_pad_zero", pm_hardcoded_zero),
    ("padding_mask", "hardcoded_pad_zero", pm_positive_tokens),
    ("padding_mask", "not_bool", pm_float),
    ("masked_attention", "pass", ma_right_renormalise),
    ("masked_attention", "pass", ma_right_nan_to_num),
    ("masked_attention", "fill_zero", ma_fill_zero),
    ("masked_attention", "inverted_mask", ma_inverted),
    ("masked_attention", "nan_on_dead_rows", ma_no_guard),
    ("masked_attention", "finite_fill", ma_big_negative),
    ("masked_attention", "mask_after_softmax", ma_zero_weights_after_softmax),
    ("masked_attention", "no_scaling", ma_no_scale),
    ("attention_flops", "pass", af_right),
    ("attention_flops", "half_count", af_one_product),
    ("attention_flops", "quarter_count", af_macs),
    ("attention_flops", "float_count", af_float),
    ("attention_flops", "included_softmax", af_softmax_counted),
    ("attention_flops", "n_and_d_swapped", af_dims_confused),
    ("attention_memory", "pass", am_right),
    ("attention_memory", "forgot_heads", am_forgot_heads),
    ("attention_memory", "elements_not_bytes", am_elements),
    ("attention_memory", "bits_not_bytes", am_bits),
    ("attention_memory", "scores_and_weights", am_scores_and_weights),
    ("attention_memory", "linear_in_n", am_linear),
    ("layer_flops", "pass", lf_right),
    ("layer_flops", "forgot_w_o", lf_forgot_output_projection),
    ("layer_flops", "multiply_add_as_one", lf_macs),
    ("layer_flops", "forgot_pv", lf_one_core_product),
    ("layer_flops", "fused_qkv_as_one", lf_fused_qkv_once),
    ("layer_flops", "float_count", lf_float),
    ("decode_step", "pass", ds_right_explicit),
    ("decode_step", "attend_before_append", ds_attend_old_cache_only),
    ("decode_step", "attend_before_append", ds_mask_from_old_cache_length),
    ("decode_step", "keys_not_rotated", ds_key_not_rotated),
    ("decode_step", "no_position_offset", ds_rows_from_zero),
    ("decode_step", "top_left_mask", ds_top_left_mask),
    ("decode_step", "no_causal_mask", ds_no_mask),
    ("decode_step", "positions_on_values", ds_values_rotated),
    ("decode_step", "unrotated_keys_cached", ds_cache_keeps_unrotated_keys),
    ("decode_step", "rotated_backwards", ds_rotate_half_sign),
    ("repeat_kv", "pass", rk_right_index),
    ("repeat_kv", "pass", rk_right_expand),
    ("repeat_kv", "tiled", rk_tiled_repeat),
    ("repeat_kv", "tiled", rk_tiled_cat),
    ("repeat_kv", "tiled", rk_tiled_expand),
    ("repeat_kv", "wrong_dim_seq", rk_interleave_sequence),
    ("repeat_kv", "wrong_dim_batch", rk_interleave_batch),
    ("sliding_window_mask", "pass", sw_right_tril_triu),
    ("sliding_window_mask", "pass", sw_right_distance),
    ("sliding_window_mask", "off_by_one", sw_one_too_many),
    ("sliding_window_mask", "not_causal", sw_symmetric),
    ("sliding_window_mask", "not_causal", sw_not_causal),
    ("sliding_window_mask", "excludes_self", sw_excludes_itself),
    ("sliding_window_mask", "off_by_one", sw_tril_triu_off_by_one),
    ("kv_cache_bytes", "pass", kb_right_itemsize),
    ("kv_cache_bytes", "query_heads", kb_query_heads),
    ("kv_cache_bytes", "no_factor_two", kb_keys_only),
    ("kv_cache_bytes", "bits_not_bytes", kb_bits),
    ("kv_cache_bytes", "two_bytes_hardcoded", kb_fp16_hardcoded),
    ("kv_cache_bytes", "float_bytes", kb_float_division),
    ("document_attention", "pass", da_right_searchsorted),
    ("document_attention", "pass", da_right_dense),
    ("document_attention", "excludes_self", da_strictly_earlier),
    ("document_attention", "excludes_self", da_strictly_earlier_dense),
    ("document_attention", "not_causal", da_no_causal),
    ("document_attention", "causal_only", da_causal_only),
    ("document_attention", "boundary_off_by_one", da_searchsorted_left),
    ("document_attention", "future_not_past", da_future_of_document),
    ("softcap_attention", "pass", sc_right_dense),
    ("softcap_attention", "pass", sc_right_flex),
    ("softcap_attention", "tanh_of_raw_score", sc_tanh_times_cap),
    ("softcap_attention", "no_rescale", sc_no_multiply_back),
    ("softcap_attention", "capped_before_scaling", sc_cap_before_scaling),
    ("softcap_attention", "hard_clip", sc_hard_clamp),
    ("softcap_attention", "no_scaling", sc_unscaled_scores),
    ("induction_score", "pass", is_right_diagonal),
    ("induction_score", "pass", is_right_loop),
    ("induction_score", "same_token", is_same_token),
    ("induction_score", "whole_diagonal", is_diagonal_extra_row),
    ("induction_score", "sum_not_mean", is_sum),
    ("induction_score", "transposed", is_transposed),
    ("induction_score", "divided_by_n", is_divide_by_n),
    ("induction_score", "previous_token", is_previous_token),
    ("causal_block", "pass", cb_right_is_causal),
    ("causal_block", "pass", cb_right_explicit_mask),
    ("causal_block", "post_norm", cb_post_norm),
    ("causal_block", "inverted_mask", cb_inverted_mask),
    ("causal_block", "no_mask", cb_no_mask),
    ("causal_block", "parallel", cb_mlp_on_input),
    ("causal_block", "no_residual", cb_no_mlp_residual),
    ("causal_block", "one_norm_twice", cb_ln1_twice),
    ("causal_block", "inverted_mask", cb_triu_mask),
]
