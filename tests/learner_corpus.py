"""Submissions written as different learners would write them (not copied from the solutions):
right ones in several styles, and the wrong ones real learners make. Each entry names the
verdict it must get: ``"pass"`` or the id of the declared mistake that must be recognised.

Used by ``test_exercises_corpus.py`` (one seed each, then 100 seeds: no verdict may flip).
"""

from __future__ import annotations

import math

import torch

# --------------------------------------------------------------------------- softmax (ch. 3)


def sm_right_max(x, dim=-1):
    z = x - x.max(dim=dim, keepdim=True).values
    return z.exp() / z.exp().sum(dim, keepdim=True)


def sm_right_logsumexp_style(x, dim=-1):
    m = torch.amax(x, dim, keepdim=True)
    lse = m + torch.log(torch.sum(torch.exp(x - m), dim, keepdim=True))
    return torch.exp(x - lse)


def sm_sum_dim0(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


def sm_sum_dim0_max_style(x, dim=-1):
    m, _ = torch.max(x, dim=dim, keepdim=True)
    num = torch.exp(x - m)
    den = torch.sum(num, 0, keepdim=True)
    return num / den


def sm_sum_everything(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()


def sm_sum_everything_torch_sum(x, dim=-1):
    ex = (x - torch.amax(x, dim=dim, keepdim=True)).exp()
    return ex / torch.sum(ex)


def sm_unstable(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


def sm_mean_shift(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def sm_global_max(x, dim=-1):
    e = torch.exp(x - torch.max(x))
    return e / e.sum(dim=dim, keepdim=True)


def sm_last_axis(x, dim=-1):
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def sm_no_division(x, dim=-1):
    return torch.exp(x - x.amax(dim, keepdim=True))


# --------------------------------------------------------------------------- apply_rope (ch. 5)


def rope_right_complex_free(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    i = torch.arange(E // 2, dtype=torch.float64)
    inv = 1.0 / base ** (2 * i / E)
    t = torch.arange(offset, offset + L, dtype=torch.float64)
    ang = torch.outer(t, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


def rope_hf_float32(x, offset=0, base=10000.0):
    """Hugging Face's Llama: inv_freq and the angles in float32, then cast to x's dtype."""
    L, E = x.shape[-2:]
    inv_freq = 1.0 / (base ** (torch.arange(0, E, 2, dtype=torch.int64).float() / E))
    t = torch.arange(offset, offset + L).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rope_float32_angles_plain(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    theta = base ** (-2 * torch.arange(E // 2) / E)       # float32 by default
    pos = torch.arange(offset, offset + L)[:, None]
    angle = (pos * theta).repeat(1, 2)
    x1, x2 = x[..., :E // 2], x[..., E // 2:]
    return x * angle.cos().to(x.dtype) + torch.cat([-x2, x1], -1) * angle.sin().to(x.dtype)


def rope_no_offset(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    theta = base ** (-2 * torch.arange(E // 2, dtype=torch.float64) / E)
    angle = (torch.arange(L, dtype=torch.float64)[:, None] * theta).repeat(1, 2)
    x1, x2 = x[..., :E // 2], x[..., E // 2:]
    return x * angle.cos().to(x.dtype) + torch.cat([-x2, x1], -1) * angle.sin().to(x.dtype)


def rope_adjacent(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    theta = base ** (-2 * torch.arange(E // 2, dtype=torch.float64) / E)
    a = torch.arange(offset, offset + L, dtype=torch.float64)[:, None] * theta
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return out


# --------------------------------------------------------------------------- alibi_bias (ch. 5)


def alibi_right_loop(H, L, S):
    out = torch.zeros(H, L, S)
    for h in range(H):
        m = 2 ** (-8 * (h + 1) / H)
        for i in range(L):
            for j in range(S):
                out[h, i, j] = m * (j - (i + S - L))
    return out


def alibi_slopes_from_zero(H, L, S):
    slopes = torch.tensor([2 ** (-8 * h / H) for h in range(H)])
    rel = torch.arange(S)[None, :] - torch.arange(S - L, S)[:, None]
    return (slopes[:, None, None] * rel).float()


def alibi_slopes_from_zero_pow(H, L, S):
    slopes = torch.pow(2.0, -8.0 * torch.arange(H) / H)
    d = (torch.arange(S).view(1, S) - torch.arange(S - L, S).view(L, 1)).float()
    return slopes.view(H, 1, 1) * d


def alibi_precedence(H, L, S):
    out = torch.empty(H, L, S)
    rel = (torch.arange(S)[None, :] - torch.arange(S - L, S)[:, None]).float()
    for h in range(H):
        out[h] = 2 ** -8 * (h + 1) / H * rel
    return out


def alibi_symmetric(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1) / H)
    dist = (torch.arange(S)[None, :] - torch.arange(S - L, S)[:, None]).abs().float()
    return -slopes[:, None, None] * dist


def alibi_top_left(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1) / H)
    rel = (torch.arange(S)[None, :] - torch.arange(L)[:, None]).float()
    return slopes[:, None, None] * rel


# ------------------------------------------------------------------ sliding window (ch. 10)


def sw_right_tril_triu(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ones.triu(-(window - 1))


def sw_excludes_self(n, window):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j < i) & (i - j <= window)


def sw_excludes_self_tril(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril(-1) & ones.triu(-window)


def sw_excludes_self_short(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (d > 0) & (d < window)


def sw_inverted(n, window):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j > i) | (j <= i - window)


def sw_inverted_not(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return ~((d >= 0) & (d < window))


def sw_off_by_one(n, window):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (d >= 0) & (d <= window)


# ------------------------------------------------------------------ kv_cache_bytes (ch. 10)


def kv_right(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * tokens * layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def kv_two_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * 2 * tokens


def kv_fp16_constant(tokens, layers, heads, kv_heads, head_dim, dtype):
    BYTES_FP16 = 2
    per_token = 2 * layers * kv_heads * head_dim * BYTES_FP16
    return per_token * tokens


def kv_q_cached(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 3 * layers * kv_heads * head_dim * dtype.itemsize * tokens


def kv_q_heads_cached(tokens, layers, heads, kv_heads, head_dim, dtype):
    per_layer = (heads + kv_heads + kv_heads) * head_dim * dtype.itemsize
    return per_layer * layers * tokens


def kv_no_tokens(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * dtype.itemsize


def kv_query_heads(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * heads * head_dim * dtype.itemsize * tokens


def kv_bits(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * layers * kv_heads * head_dim * torch.finfo(dtype).bits * tokens


# --------------------------------------------------------------------------- layer_flops (ch. 7)


def lf_right_by_parts(n, d_model):
    proj = 4 * (2 * n * d_model * d_model)
    attn = 2 * (2 * n * n * d_model)
    return proj + attn


def lf_with_mlp(n, d_model):
    attn = 8 * n * d_model ** 2 + 4 * n ** 2 * d_model
    mlp = 2 * (2 * n * d_model * 4 * d_model)
    return attn + mlp


def lf_with_softmax(n, d_model):
    matmuls = 8 * n * d_model ** 2 + 4 * n ** 2 * d_model
    softmax = 3 * n * n          # exp, sum, divide
    return matmuls + softmax


def lf_with_softmax_max(n, d_model):
    return 8 * n * d_model ** 2 + 4 * n ** 2 * d_model + 5 * n * n


def lf_with_biases(n, d_model):
    flops = 0
    for _ in range(4):                            # W_Q, W_K, W_V, W_O
        flops += 2 * n * d_model * d_model + n * d_model
    return flops + 4 * n * n * d_model


def lf_half(n, d_model):
    return 4 * n * d_model ** 2 + 2 * n * n * d_model


def lf_forgot_wo(n, d_model):
    return 6 * n * d_model ** 2 + 4 * n * n * d_model


# --------------------------------------------------------------------------- the corpus

CORPUS: list[tuple[str, str, object]] = [
    ("softmax", "pass", sm_right_max),
    ("softmax", "pass", sm_right_logsumexp_style),
    ("softmax", "sum_over_wrong_axis", sm_sum_dim0),
    ("softmax", "sum_over_wrong_axis", sm_sum_dim0_max_style),
    ("softmax", "sum_over_everything", sm_sum_everything),
    ("softmax", "sum_over_everything", sm_sum_everything_torch_sum),
    ("softmax", "not_stable", sm_unstable),
    ("softmax", "mean_shift", sm_mean_shift),
    ("softmax", "global_max", sm_global_max),
    ("softmax", "ignores_dim", sm_last_axis),
    ("softmax", "no_normalisation", sm_no_division),
    ("apply_rope", "pass", rope_right_complex_free),
    ("apply_rope", "float32_angles", rope_hf_float32),
    ("apply_rope", "float32_angles", rope_float32_angles_plain),
    ("apply_rope", "forgot_offset", rope_no_offset),
    ("apply_rope", "adjacent_pairs", rope_adjacent),
    ("alibi_bias", "pass", alibi_right_loop),
    ("alibi_bias", "slopes_from_zero", alibi_slopes_from_zero),
    ("alibi_bias", "slopes_from_zero", alibi_slopes_from_zero_pow),
    ("alibi_bias", "slopes_precedence", alibi_precedence),
    ("alibi_bias", "symmetric_distance", alibi_symmetric),
    ("alibi_bias", "top_left_alignment", alibi_top_left),
    ("sliding_window_mask", "pass", sw_right_tril_triu),
    ("sliding_window_mask", "excludes_self", sw_excludes_self),
    ("sliding_window_mask", "excludes_self", sw_excludes_self_tril),
    ("sliding_window_mask", "excludes_self_short", sw_excludes_self_short),
    ("sliding_window_mask", "inverted", sw_inverted),
    ("sliding_window_mask", "inverted", sw_inverted_not),
    ("sliding_window_mask", "off_by_one", sw_off_by_one),
    ("kv_cache_bytes", "pass", kv_right),
    ("kv_cache_bytes", "two_bytes_hardcoded", kv_two_bytes),
    ("kv_cache_bytes", "two_bytes_hardcoded", kv_fp16_constant),
    ("kv_cache_bytes", "queries_cached", kv_q_cached),
    ("kv_cache_bytes", "query_heads_cached", kv_q_heads_cached),
    ("kv_cache_bytes", "ignores_tokens", kv_no_tokens),
    ("kv_cache_bytes", "query_heads", kv_query_heads),
    ("kv_cache_bytes", "bits_not_bytes", kv_bits),
    ("layer_flops", "pass", lf_right_by_parts),
    ("layer_flops", "included_mlp", lf_with_mlp),
    ("layer_flops", "included_softmax", lf_with_softmax),
    ("layer_flops", "included_softmax_with_max", lf_with_softmax_max),
    ("layer_flops", "included_biases", lf_with_biases),
    ("layer_flops", "multiply_add_as_one", lf_half),
    ("layer_flops", "forgot_w_o", lf_forgot_wo),
]

#: The verdicts that say only that something is wrong, not what.
GENERIC = frozenset({"wrong_values", "nan", "inf", "raised"})


# ------------------------------------------------------------------ masked_attention (ch. 6)


def ma_right_where(q, k, v, mask):
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = torch.where(mask, s, torch.tensor(float("-inf"), dtype=s.dtype))
    m = s.max(dim=-1, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(-1, keepdim=True)
    return (p / denom.clamp_min(1e-30)) @ v


def ma_unstable_guarded(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    e = torch.exp(s.masked_fill(~mask, float("-inf")))
    z = e.sum(-1, keepdim=True)
    return (e / torch.where(z == 0, 1.0, z)) @ v


def ma_unstable(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    e = torch.exp(s.masked_fill(~mask, float("-inf")))
    return (e / e.sum(-1, keepdim=True)) @ v


def ma_inverted(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(mask, float("-inf"))
    m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    e = (s - m).exp()
    z = e.sum(-1, keepdim=True)
    return (e / torch.where(z == 0, torch.ones_like(z), z)) @ v


CORPUS += [
    ("masked_attention", "pass", ma_right_where),
    ("masked_attention", "not_stable", ma_unstable_guarded),
    ("masked_attention", "not_stable_nan_rows", ma_unstable),
    ("masked_attention", "inverted_mask", ma_inverted),
]
