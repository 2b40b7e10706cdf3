"""Chapter 10's tools: the cached and uncached decoders agree token for token, the counts of
scores are right, the sliding-window reach, paged storage, cache sizes and the committed
benchmark results."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from course_lib.attention import IMPLEMENTATIONS
from course_lib.chapters.ch10_inference import explorer, helpers

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def model():
    return helpers.TinyGPT(dim=32, heads=4, layers=2, max_len=128, seed=0)


def _prompt(n=6, seed=1):
    return torch.randint(0, 64, (2, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_cached_and_uncached_decoders_give_identical_tokens(model, impl):
    attend = IMPLEMENTATIONS[impl]
    plain = helpers.generate_uncached(model, _prompt(), 24, attend)
    cached = helpers.generate_cached(model, _prompt(), 24, attend)
    assert torch.equal(plain.tokens, cached.tokens)
    torch.testing.assert_close(plain.logits, cached.logits, atol=1e-5, rtol=1e-5)
    assert len(set(plain.tokens[0].tolist())) > 3           # not a constant sequence
    assert [len(c) for c in cached.caches] == [6 + 23] * model.layers


def test_forgetting_the_position_offset_changes_the_tokens(model):
    prompt = _prompt()
    good = helpers.generate_cached(model, prompt, 12)
    caches = model.new_caches()
    model.step(prompt, caches)
    for c in caches:           # pretend the prompt was not seen: positions restart at 0
        c.seen = 0
    logits = model.step(good.tokens[:, :1], caches)[:, -1]
    assert not torch.allclose(logits, good.logits[:, 1])


def test_model_does_not_touch_the_global_rng():
    torch.manual_seed(5)
    a = torch.rand(3)
    torch.manual_seed(5)
    helpers.TinyGPT(dim=16, heads=2, layers=1, max_len=8)
    assert torch.equal(torch.rand(3), a)


def test_counted_scores_match_the_formulas(model):
    prompt, n_new = _prompt(5), 9
    for cached, gen in ((False, helpers.generate_uncached), (True, helpers.generate_cached)):
        counter = helpers.CountingAttention()
        gen(model, prompt, n_new, counter)
        per_layer_head = helpers.total_scores(5, n_new, cached)
        assert counter.scores == per_layer_head * model.layers * model.heads * 2
    assert helpers.total_scores(5, 9, False) == sum((5 + i) ** 2 for i in range(9))
    assert helpers.scores_per_step(100, True) == 100 and helpers.scores_per_step(100, False) \
        == 10_000


def test_receptive_field_grows_by_window_minus_one_per_layer():
    for window, layers in ((4, 1), (4, 3), (8, 5), (2, 7)):
        assert helpers.farthest_reach(64, window, layers) == layers * (window - 1)
    assert helpers.receptive_field(10, 3, 1).equal(
        torch.ones(10, 10, dtype=torch.bool).tril() & ~torch.ones(10, 10, dtype=torch.bool)
        .tril(-3))


def test_rolling_cache_decoder_matches_windowed_full_attention(model):
    prompt = _prompt(4)
    gen = helpers.generate_cached(model, prompt, 16, window=5)
    # recompute: the whole sequence under the sliding-window mask
    seq = torch.cat([prompt, gen.tokens], 1)
    from course_lib.attention.masks import sliding_window_mask
    mask = sliding_window_mask(seq.shape[1], window=5)

    def windowed(q, k, v, is_causal=False, **kw):
        return IMPLEMENTATIONS["sdpa"](q, k, v, attn_mask=mask[:q.shape[-2], :k.shape[-2]])

    logits = model(seq, windowed)[:, prompt.shape[1] - 1:-1]
    torch.testing.assert_close(logits, gen.logits, atol=1e-5, rtol=1e-5)
    assert all(len(c) == 5 and c.seen == 4 + 15 for c in gen.caches)


def test_paged_pool_gathers_what_was_stored():
    pool = helpers.PagedKVPool(num_blocks=8, block_size=4, heads=2, head_dim=3)
    lengths = [7, 2, 9]
    for t in range(max(lengths)):
        for s, n in enumerate(lengths):
            if t < n:
                pool.append(s, torch.full((2, 3), 10.0 * s + t), torch.full((2, 3), -t - 1.0))
    assert [len(pool.tables[s]) for s in range(3)] == [2, 1, 3]
    assert sorted(b for t in pool.tables.values() for b in t) == list(range(6))
    for s, n in enumerate(lengths):
        k, v = pool.gather(s)
        assert k.shape == (2, n, 3)
        assert k[0, :, 0].tolist() == [10.0 * s + t for t in range(n)]
    with pytest.raises(MemoryError):
        for _ in range(12):
            pool.append(0, torch.zeros(2, 3), torch.zeros(2, 3))


def test_allocation_rows():
    rows = helpers.allocation_rows([37, 5, 120, 64], max_len=256, block_size=16)
    assert rows[0]["slots reserved"] == 1024 and rows[0]["wasted"] == 1024 - 226
    assert rows[1]["slots reserved"] == 16 * (3 + 1 + 8 + 4) and rows[1]["wasted"] == 30
    assert rows[1]["wasted"] < 4 * 16          # less than one block per sequence


def test_published_cache_sizes():
    rows = {r["model"]: r for r in helpers.cache_rows(tokens=8192)}
    assert rows["Llama 2 7B"]["KiB/token"] == 512
    assert rows["Llama 3 8B"]["KiB/token"] == 128
    assert rows["Falcon 7B"]["KiB/token"] == 8
    assert rows["Llama 2 7B"]["GiB at 8192 tokens"] == 4
    assert rows["Mistral 7B"]["GiB at 8192 tokens"] == 0.5   # window 4096 caps the tokens


def test_committed_benchmark_results_are_complete():
    data = helpers.load_decode_results()
    rows = data["results"]
    assert [r["n_new"] for r in rows] == sorted(r["n_new"] for r in rows) and len(rows) >= 4
    for r in rows:
        assert r["tokens_per_s_cached"] > 0 and r["tokens_per_s_uncached"] > 0
        m = data["model"]        # K and V, every layer, all heads: 2 · layers · dim · 4 bytes
        assert r["cache_bytes"] == 2 * m["layers"] * m["dim"] * 4 * r["cached_tokens"]
        assert r["cached_tokens"] == r["prompt"] + r["n_new"] - 1
    table = helpers.results_rows(data)
    assert set(table[0]) >= {"generated tokens", "speed-up", "cache KiB"}


def test_explorer_counts_cells():
    assert explorer.cumulative_scores(12, "off") == sum(t * (t + 1) // 2 for t in range(1, 13))
    assert explorer.cumulative_scores(12, "on") == sum(range(1, 13))
    assert explorer.cumulative_scores(12, "on", 3) == 1 + 2 + 3 * 10
    fig = explorer.decoding_explorer().render(step=5, cache="off")
    assert len(fig.axes) == 2
    assert explorer.draw_decoding(matplotlib.pyplot.figure(), 5, "on", "3") == 3
    matplotlib.pyplot.close("all")


# --------------------------------------------------------------------------- per-row positions


@pytest.mark.parametrize("rope", [True, False])
def test_batched_decoding_of_left_padded_prompts_equals_decoding_each_alone(rope):
    """Issue 27: left padding + pad keys hidden + per-row position_ids give every row the
    tokens it gets alone (cached and uncached), for rotary and for learned positions."""
    model = helpers.TinyGPT(vocab=50, dim=32, heads=4, layers=2, seed=3, rope=rope).double()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 50, (n,), generator=g) for n in (7, 3, 5, 1)]
    alone = [helpers.generate_cached(model, p[None], 8).tokens[0].tolist() for p in prompts]
    batched = helpers.generate_batched(model, prompts, 8)
    assert batched.tolist() == alone
    assert helpers.generate_uncached(model, prompts[1][None], 8).tokens[0].tolist() == alone[1]
    shared = helpers.generate_batched(model, prompts, 8, per_row_positions=False).tolist()
    if rope:      # RoPE sees only m - n: one shared offset shifts a row's positions equally
        assert shared == alone
    else:         # a learned table: the short rows read the wrong rows of it
        assert shared[0] == alone[0] and shared[1:] != alone[1:]
    # without hiding the pad keys the short rows attend to pads and change
    tokens, real = helpers.left_pad(prompts)
    no_hide = helpers.padded_attention(torch.ones_like(real))
    pos = (real.long().cumsum(1) - 1).clamp(min=0)
    logits = model.step(tokens, model.new_caches(), no_hide, position_ids=pos)[:, -1]
    want = model.step(tokens, model.new_caches(), helpers.padded_attention(real),
                      position_ids=pos)[:, -1]
    assert torch.allclose(logits[0], want[0])
    assert all(not torch.allclose(logits[b], want[b]) for b in (1, 2, 3))


def test_decode_intensity_is_two_h_over_hkv_bytes():
    for h_kv in (32, 8, 1):
        r = helpers.decode_intensity(32, h_kv, 128, 10**6, bytes_per_element=2)
        assert r["FLOPs"] == 4 * 32 * 128 * 10**6
        assert abs(r["FLOP/byte"] - 32 / h_kv) < 1e-3 * 32 / h_kv
    short = helpers.decode_intensity(4, 4, 8, 1, bytes_per_element=4)
    assert short["bytes"] == (2 * 4 * 8 + 2 * 4 * 8) * 4


def test_grouped_decode_attention_is_gqa_without_copies():
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 9, 16, generator=g, dtype=torch.float64) for _ in range(2))
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch.allclose(helpers.grouped_decode_attention(q, k, v), want)
    grouped = lambda q, k, v, **kw: helpers.grouped_decode_attention(q[..., :1, :], k, v[..., :4])  # noqa: E731
    assert helpers.kv_copies(grouped) == []
    copying = lambda q, k, v, **kw: F.scaled_dot_product_attention(  # noqa: E731
        q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
    assert helpers.kv_copies(copying)
