"""The KV cache core: decode steps equal full recomputation, GQA equals torch's enable_gqa,
the rolling cache equals full attention under the sliding-window mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import IMPLEMENTATIONS, KVCache, decode_step, masks, repeat_kv
from course_lib.attention.kv_cache import kv_cache_bytes

CHUNKS = [(0, 4), (4, 5), (5, 6), (6, 9), (9, 10), (10, 11)]   # a prompt, then 1, 1, 3, 1, 1


def _qkv(Hq=6, Hkv=2, N=11, E=4, Ev=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, Hq, N, E, generator=g, dtype=torch.float64)
    k = torch.randn(2, Hkv, N, E, generator=g, dtype=torch.float64)
    v = torch.randn(2, Hkv, N, Ev, generator=g, dtype=torch.float64)
    return q, k, v


def _decode(q, k, v, cache, attend, gqa):
    outs = [decode_step(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], cache, attend,
                        enable_gqa=gqa) for a, b in CHUNKS]
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_decoding_in_steps_equals_one_causal_pass(impl):
    q, k, v = _qkv(Hq=3, Hkv=3)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    cache = KVCache()
    out = _decode(q, k, v, cache, impl, gqa=False)
    torch.testing.assert_close(out, full)
    assert len(cache) == cache.seen == 11
    torch.testing.assert_close(cache.view()[0], k)
    torch.testing.assert_close(cache.view()[1], v)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_gqa_decoding_equals_torch_enable_gqa(impl):
    q, k, v = _qkv()
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out = _decode(q, k, v, KVCache(), IMPLEMENTATIONS[impl], gqa=True)
    torch.testing.assert_close(out, full)


def test_repeat_kv_is_torchs_gqa_grouping():
    q, k, v = _qkv(Hq=8, Hkv=2)
    gqa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    mha = F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4))
    torch.testing.assert_close(gqa, mha)
    tiled = F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1))
    assert not torch.allclose(gqa, tiled)         # the other ordering is a different model
    assert repeat_kv(k, 4)[:, 5].equal(k[:, 1])   # query head 5 reads kv head 5 // 4
    assert repeat_kv(k, 1) is k
    with pytest.raises(ValueError):
        repeat_kv(k, 0)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("window", [1, 3, 5, 20])
def test_rolling_cache_equals_sliding_window_attention(impl, window):
    q, k, v = _qkv()
    mask = masks.sliding_window_mask(11, window=window)
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    cache = KVCache(window=window)
    out = _decode(q, k, v, cache, impl, gqa=True)
    torch.testing.assert_close(out, full)
    assert len(cache) == min(window, 11) and cache.seen == 11
    assert cache._k.shape[-2] == window              # fixed size: never grew
    torch.testing.assert_close(cache.view()[0], k[..., -min(window, 11):, :])


def test_cache_grows_by_doubling_and_counts_bytes():
    cache = KVCache(capacity=4)
    k = torch.zeros(1, 2, 1, 8)
    for _ in range(9):
        cache.append(k, k[..., :3])
    assert cache._k.shape[-2] == 16 and len(cache) == 9
    assert cache.nbytes == 9 * 2 * (8 + 3) * 4
    assert cache.view()[0].data_ptr() == cache._k.data_ptr()   # a view, no copy
    with pytest.raises(ValueError):
        KVCache().view()
    with pytest.raises(ValueError):
        cache.append(torch.zeros(1, 3, 1, 8), torch.zeros(1, 3, 1, 3))


def test_sliding_window_mask():
    m = masks.sliding_window_mask(6, window=3)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    assert m.equal((j <= i) & (j > i - 3))
    assert m.sum(-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert masks.sliding_window_mask(5, window=9).equal(masks.causal_mask(5))
    br = masks.sliding_window_mask(2, 6, window=3, align="bottom_right")
    assert br.equal(masks.sliding_window_mask(6, window=3)[-2:])
    with pytest.raises(ValueError):
        masks.sliding_window_mask(3, window=0)


def test_kv_cache_bytes_of_llama2_7b():
    # 32 layers, 32 kv heads of width 128, float16: 0.5 MiB per token
    assert kv_cache_bytes(1, 32, 32, 128, 2) == 2**19
    assert kv_cache_bytes(4096, 32, 8, 128, 2, batch=2) == 2 * 4096 * 2**17


# --------------------------------------------------------------------------- attention sinks


@pytest.mark.parametrize(("window", "sinks"), [(3, 1), (4, 2), (2, 4), (20, 3), (1, 1)])
@pytest.mark.parametrize("chunks", [CHUNKS, [(i, i + 1) for i in range(11)], [(0, 11)]])
def test_sinks_keep_exactly_the_first_tokens_and_the_window(window, sinks, chunks):
    k = torch.arange(11, dtype=torch.float64).reshape(1, 1, 11, 1).expand(2, 3, 11, 2)
    cache = KVCache(window=window, sinks=sinks)
    for a, b in chunks:
        cache.append(k[..., a:b, :], 2 * k[..., a:b, :1])
        n = b
        want = sorted(set(range(min(n, sinks))) | set(range(max(sinks, n - window), n)))
        assert cache.positions().tolist() == want
        keys, values = cache.view()
        assert keys[0, 0, :, 0].tolist() == want                   # the tokens' own keys
        assert values[1, 2, :, 0].tolist() == [2 * p for p in want]
        assert len(cache) == len(want) <= sinks + window and cache.seen == n
        assert cache.nbytes == len(want) * 2 * 3 * (2 + 1) * 8      # B=2, H=3, E=2, Ev=1


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize(("window", "sinks"), [(3, 2), (5, 1), (1, 4)])
def test_decoding_with_sinks_equals_attention_under_the_sink_mask(impl, window, sinks):
    """Query i sees keys j <= i with i - window < j, or j < sinks (StreamingLLM's mask)."""
    q, k, v = _qkv()
    i, j = torch.arange(11)[:, None], torch.arange(11)[None, :]
    mask = (j <= i) & ((j > i - window) | (j < sinks))
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    out = _decode(q, k, v, KVCache(window=window, sinks=sinks), impl, gqa=True)
    torch.testing.assert_close(out, full)


def test_sinks_need_a_window():
    with pytest.raises(ValueError, match="needs a window"):
        KVCache(sinks=2)
    with pytest.raises(ValueError, match="sinks"):
        KVCache(window=4, sinks=-1)
