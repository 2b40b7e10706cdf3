"""Right answers written in other styles (einsum, numpy round trip, loops) pass too."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import exercises


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


def retrieve_numpy(query, keys, values):
    s = keys.numpy() @ query.numpy()
    w = np.exp(s - s.max())
    w /= w.sum()
    return torch.from_numpy(w @ values.numpy())


def retrieve_loop(query, keys, values):
    scores = torch.stack([torch.dot(k, query) for k in keys])
    w = torch.exp(scores - scores.max())
    w = w / w.sum()
    out = torch.zeros(values.shape[1], dtype=values.dtype)
    for wi, vi in zip(w, values, strict=True):
        out = out + wi * vi
    return out


def scaled_scores_einsum(q, k):
    return torch.einsum("...le,...se->...ls", q, k) / q.shape[-1] ** 0.5


def softmax_numpy(x, dim=-1):
    a = x.numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))


def self_attention_einsum(x, w_q, w_k, w_v):
    q, k, v = (torch.einsum("bnd,de->bne", x, w) for w in (w_q, w_k, w_v))
    s = torch.einsum("bie,bje->bij", q, k) / math.sqrt(q.shape[-1])
    w = torch.exp(s - s.amax(-1, keepdim=True))
    w = w / w.sum(-1, keepdim=True)
    return torch.einsum("bij,bjm->bim", w, v), w


def split_heads_view(x, num_heads):
    B, N, _ = x.shape
    return x.view(B, N, num_heads, -1).permute(0, 2, 1, 3)


def split_heads_loop(x, num_heads):
    D = x.shape[-1] // num_heads
    return torch.stack([x[..., h * D:(h + 1) * D] for h in range(num_heads)], dim=1)


def merge_heads_cat(x):
    return torch.cat(list(x.unbind(dim=1)), dim=-1)


def mha_loop_over_heads(x, w_qkv, w_o, num_heads):
    E = x.shape[-1]
    D = E // num_heads
    q, k, v = (x @ w_qkv).split(E, dim=-1)
    outs = []
    for h in range(num_heads):
        sl = slice(h * D, (h + 1) * D)
        s = q[..., sl] @ k[..., sl].transpose(-2, -1) / math.sqrt(D)
        outs.append(torch.softmax(s, dim=-1) @ v[..., sl])
    return torch.cat(outs, dim=-1) @ w_o


def causal_mask_loops(n):
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            m[i, j] = True
    return m


def padding_mask_unsqueeze(tokens, pad_id=0):
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(2)


def masked_attention_where(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = torch.where(mask, s, torch.tensor(float("-inf"), dtype=s.dtype))
    w = torch.softmax(s, dim=-1)
    return torch.where(torch.isnan(w), torch.zeros_like(w), w) @ v


def masked_attention_finfo(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    e = torch.exp(s - s.amax(-1, keepdim=True)) * mask       # zero the masked keys exactly
    z = e.sum(-1, keepdim=True)
    return (e / z.clamp_min(torch.finfo(s.dtype).tiny)) @ v


def flops_float_then_int(n, d):
    return int(2 * 2.0 * n * n * d)


def memory_bits(n, heads=1, bytes_per_element=4):
    return heads * n ** 2 * bytes_per_element * 8 // 8


def online_stats_floats(blocks):
    m, l = -math.inf, 0.0
    for b in blocks:
        bm = float(b.max())
        new = max(m, bm)
        if new == -math.inf:          # only -inf so far: nothing to add (and -inf - -inf is NaN)
            continue
        l = l * math.exp(m - new) + float(torch.exp(b.double() - new).sum())
        m = new
    return m, l


def flash_loop_over_query_blocks(q, k, v, block_size=64):
    N, S, D = q.shape[-2], k.shape[-2], q.shape[-1]     # S keys: S != N in some cases
    out = torch.empty_like(q)
    for i in range(0, N, block_size):
        qi = q[..., i:i + block_size, :]
        m = torch.full(qi.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(qi)
        for j in range(0, S, block_size):
            s = qi @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(D)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            c = torch.exp(m - m_new)
            l = l * c + p.sum(-1, keepdim=True)
            acc = acc * c + p @ v[..., j:j + block_size, :]
            m = m_new
        out[..., i:i + block_size, :] = acc / l
    return out


STYLES = [
    ("retrieve", retrieve_numpy), ("retrieve", retrieve_loop),
    ("scaled_scores", scaled_scores_einsum),
    # (softmax by torch.logsumexp is refused since issue 51: tests/test_exercises_routes_v5.py)
    ("softmax", softmax_numpy),
    ("self_attention", self_attention_einsum),
    ("split_heads", split_heads_view), ("split_heads", split_heads_loop),
    ("merge_heads", merge_heads_cat),
    ("multi_head_attention", mha_loop_over_heads),
    ("causal_mask", causal_mask_loops), ("causal_mask", lambda n: torch.tril(torch.ones(n, n)) > 0),
    ("padding_mask", padding_mask_unsqueeze),
    ("masked_attention", masked_attention_where), ("masked_attention", masked_attention_finfo),
    ("attention_flops", flops_float_then_int), ("attention_memory", memory_bits),
    ("online_softmax_stats", online_stats_floats),
    ("flash_attention", flash_loop_over_query_blocks),
]


@pytest.mark.parametrize(("exercise_id", "fn"), STYLES,
                         ids=[f"{i}-{getattr(f, '__name__', 'lambda')}" for i, f in STYLES])
def test_other_styles_pass(exercise_id, fn):
    result = exercises.check(exercise_id, fn, seed=7)
    assert result.passed, result.message
