"""Chapter 7 helpers: FLOP and memory formulas (checked against FlopCounterMode), measuring."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from course_lib import reference
from course_lib.chapters.ch07_complexity import helpers as cx


@pytest.mark.parametrize("n,d", [(1, 1), (7, 3), (128, 64), (100, 48)])
def test_core_flops_formula(n, d):
    assert cx.attention_core_flops(n, d) == 4 * n * n * d
    s = 2 * n
    assert cx.attention_core_flops(n, d, s=s, dv=d + 1) == 2 * n * s * d + 2 * n * s * (d + 1)


@pytest.mark.parametrize("n,h,dh,s", [(32, 2, 16, 32), (17, 3, 8, 29)])
def test_core_flops_match_flop_counter(n, h, dh, s):
    q = torch.randn(1, h, n, dh)
    k, v = torch.randn(2, 1, h, s, dh).unbind(0)
    counted = cx.count_flops(reference.scaled_dot_product_attention, q, k, v)
    assert counted == h * cx.attention_core_flops(n, dh, s=s)


@pytest.mark.parametrize("n,d,h", [(64, 32, 4), (10, 24, 3)])
def test_layer_flops_match_flop_counter(n, d, h):
    x = torch.randn(1, n, d)
    w_qkv, w_o = torch.randn(d, 3 * d), torch.randn(d, d)
    counted = cx.count_flops(cx.self_attention_layer, x, w_qkv, w_o, h)
    assert counted == cx.layer_flops(n, d, h) == 4 * n * n * d + 8 * n * d * d
    parts = cx.layer_flops_breakdown(n, d, h)
    assert parts["scores QKᵀ"] == parts["weights·V"] == 2 * n * n * d
    assert parts["Q, K, V projections"] == 3 * parts["output projection"] == 6 * n * d * d


def test_self_attention_layer_matches_multihead_without_bias():
    torch.manual_seed(0)
    d, h = 16, 4
    mha = torch.nn.MultiheadAttention(d, h, bias=False, batch_first=True)
    x = torch.randn(2, 5, d)
    w_qkv = mha.in_proj_weight.detach().T            # (d, 3d): x @ w_qkv = [q | k | v]
    w_o = mha.out_proj.weight.detach().T
    expected, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(cx.self_attention_layer(x, w_qkv, w_o, h), expected,
                               atol=1e-5, rtol=1e-5)


def test_crossover_is_where_core_equals_projections():
    for d in (64, 512, 768, 4096):
        n = cx.crossover_n(d)
        parts = cx.layer_flops_breakdown(n, d)
        core = parts["scores QKᵀ"] + parts["weights·V"]
        assert core == cx.projection_flops(n, d)
        smaller = cx.layer_flops_breakdown(n - 1, d)
        assert smaller["scores QKᵀ"] + smaller["weights·V"] < cx.projection_flops(n - 1, d)
    with pytest.raises(ValueError):
        cx.layer_flops_breakdown(10, 30, num_heads=4)


def test_score_memory_and_format():
    assert cx.score_matrix_bytes(16384) == 2**30
    assert cx.score_matrix_bytes(100, heads=12, batch=2, bytes_per_element=2) == 2 * 12 * 100**2 * 2
    assert cx.score_matrix_bytes(4, s=8) == 4 * 8 * 4
    assert cx.format_bytes(512) == "512 B"
    assert cx.format_bytes(1536) == "1.5 KiB"
    assert cx.format_bytes(3 * 2**30) == "3.0 GiB"


def test_sequence_model_table():
    attn, rnn, conv = cx.sequence_model_table(n=81, d=16, kernel=3)
    assert attn["FLOPs"] == 4 * 81 * 81 * 16 and rnn["FLOPs"] == 4 * 81 * 16 * 16
    assert conv["FLOPs"] == 3 * 2 * 81 * 16 * 16
    assert conv["max path length"] == 4                    # 3^4 = 81
    assert rnn["sequential steps"] == 81 and rnn["max path length"] == 80
    assert attn["max path length"] == 1 and attn["sequential steps"] == 1


def test_loglog_slope_recovers_exponent():
    ns = [100, 200, 400, 800]
    assert cx.fit_loglog_slope(ns, [3 * n**2 for n in ns]) == pytest.approx(2.0)
    assert cx.fit_loglog_slope(ns, [5 * n**1.5 for n in ns]) == pytest.approx(1.5)
    records = [{"impl": "a", "n": n, "y": n**2} for n in ns] + [{"impl": "a", "n": 10, "y": 1}]
    assert cx.slopes(records, "y", min_n=100)["a"] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        cx.fit_loglog_slope([1], [1])


def test_cache_sizes_are_plausible():
    sizes = cx.cache_sizes()
    for name, size in sizes.items():
        assert name.startswith("L") and size > 0
    if "L2" in sizes and "L1d" in sizes:
        assert sizes["L2"] > sizes["L1d"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_peak_extra_memory_sees_a_big_temporary():
    nbytes = 64 * 2**20

    def make():
        t = torch.ones(nbytes // 4)                 # 64 MiB, touched
        return float(t[-1])

    peak = cx.peak_extra_memory(make)
    if peak is None:
        pytest.skip("/proc/self/clear_refs not writable here")
    assert 0.9 * nbytes <= peak <= 1.5 * nbytes


def test_sweep_records_and_memory_slopes():
    impls = {"reference": reference.scaled_dot_product_attention}
    saved = torch.get_num_threads()
    recs = cx.sweep(impls, ns=(64, 128), heads=2, d=16, repeats=1, min_total_s=0.0,
                    threads=1, progress=False)
    assert torch.get_num_threads() == saved
    assert [(r["impl"], r["n"]) for r in recs] == [("reference", 64), ("reference", 128)]
    for r in recs:
        assert r["flops"] == 2 * 4 * r["n"] ** 2 * 16
        assert r["seconds"] > 0 and math.isclose(r["gflops_per_s"], r["flops"] / r["seconds"] / 1e9)
        assert r["user_seconds"] + r["system_seconds"] == pytest.approx(r["seconds"])


def test_committed_benchmark_missing_dir_returns_none(tmp_path):
    assert cx.committed_benchmark(tmp_path) is None


def test_memory_and_measured_rows():
    rows = cx.score_memory_rows([100, 16384], heads=(1, 12))
    assert rows[0]["12 heads bf16"] == cx.format_bytes(12 * 100 * 100 * 2)
    assert rows[1]["1 head fp32"] == "1.0 GiB"
    rec = {"impl": "x", "n": 8, "seconds": 0.0123, "peak_bytes": 3 * 2**20, "gflops_per_s": 4.56}
    row = cx.measured_rows([rec])[0]
    assert row["CPU time"] == "≃12.3 ms" and row["peak extra memory"] == "≃3 MiB"
    assert row["GFLOP/s"] == "≃4.56"


def test_fits_in_and_cliff_rows():
    caches = {"L2": 2**20, "L3": 32 * 2**20}
    assert cx.fits_in(2**19, caches) == "L2" and cx.fits_in(2**24, caches) == "L3"
    assert cx.fits_in(2**26, caches) == "DRAM" and cx.fits_in(1, {}) == "DRAM"
    recs = [{"impl": i, "n": n, "gflops_per_s": float(n) + (i == "sdpa"), "flops": 4e9,
             "user_seconds": 1.0, "system_seconds": 3.0,
             "peak_bytes": 3 * 8 * n * n * 4} for n in (64, 1024) for i in ("reference", "sdpa")]
    rows = cx.cliff_rows(recs, caches)
    assert [r["fits in"] for r in rows] == ["L2", "DRAM"]
    assert rows[1]["naive"] == 1024.0 and rows[1]["fused"] == 1025.0
    assert rows[0]["working set"] == 3 * 8 * 64 * 64 * 4
    assert rows[0]["kernel share"] == 0.75 and rows[0]["naive user-only"] == 4.0


def test_time_call_split_cpu_clock_sees_system_time():
    import mmap

    def touch_fresh_pages():                      # the OS must zero-fill 32 MiB of pages
        m = mmap.mmap(-1, 32 * 2**20)
        for i in range(0, len(m), 4096):
            m[i] = 1
        m.close()

    best, user, system = cx.time_call_split(touch_fresh_pages, clock="cpu")
    assert best == pytest.approx(user + system) and system > 0
    wall = cx.time_call_split(lambda: None, clock="wall")
    assert math.isnan(wall[1]) and math.isnan(wall[2])
    with pytest.raises(ValueError):
        cx.time_call_split(lambda: None, clock="gpu")


def test_cliff_summary_and_matmul_fractions():
    rows = [{"n": 256, "fits in": "L3", "naive": 30.0, "naive user-only": 30.0,
             "kernel share": 0.0, "working set": 2**20},
            {"n": 1024, "fits in": "DRAM", "naive": 15.0, "naive user-only": 40.0,
             "kernel share": 0.6, "working set": 2**30}]
    s = cx.os_time_summary(rows)
    assert s["fast"] / s["slow"] == 2.0 and s["os_jump"] == 0.6 and s["n_jump"] == 1024
    assert s["fits_jump"] == "DRAM" and s["os_before"] == 0.0
    assert cx.os_time_summary(rows[:1]) is None                     # never reaches the share
    assert cx.os_time_summary(rows[1:]) is None                     # nothing before the jump
    # the split follows the OS time, not the cache: a jump inside L3 is found where it is
    in_l3 = [dict(rows[0], n=128), dict(rows[1], n=512, **{"fits in": "L3"}),
             dict(rows[1], n=2048, naive=12.0, **{"kernel share": 0.55})]
    s = cx.os_time_summary(in_l3)
    assert (s["n_jump"], s["fits_jump"], s["slow"]) == (512, "L3", 15.0)
    assert cx.os_time_summary(in_l3, share=0.65) is None
    bench = {"data": {"results": [
        {"impl": "reference", "n": 8, "causal": False, "frac_matmul": 0.1},
        {"impl": "torch", "n": 8, "causal": False, "frac_matmul": 0.7},
        {"impl": "torch", "n": 16, "causal": False, "frac_matmul": 0.8},
        {"impl": "reference", "n": 8, "causal": True, "frac_matmul": 0.2}]}}
    assert cx.matmul_fractions(bench) == {8: {"reference": 0.1, "torch": 0.7}}


def test_beyond_full_counts_match_masks_and_flop_counter():
    from course_lib.attention.masks import sliding_window_mask
    from course_lib.chapters.ch07_complexity import helpers as cx
    for n, w in [(1, 1), (5, 9), (10, 3), (64, 16), (33, 33)]:
        assert int(sliding_window_mask(n, window=w).sum()) == cx.sliding_window_pairs(n, w)
        assert int(cx.strided_mask(n, w).sum()) == cx.strided_pairs(n, w)
    assert cx.sliding_window_pairs(100, 100) == 100 * 101 // 2     # window >= n: causal
    q, k, v = torch.randn(3, 2, 3, 20, 8).unbind(0)
    assert cx.count_flops(cx.linear_attention, q, k, v) == 2 * 3 * 4 * 20 * 8 * 8
    rows = cx.beyond_full_rows([1024], d_model=256, num_heads=4, window=128)
    assert [r["method"].split()[0] for r in rows] == ["full", "sliding", "strided,", "linear"]
    assert rows[0]["core FLOPs"] == 4 * (1024 * 1025 // 2) * 256
    assert rows[-1]["pairs per head"] is None and rows[-1]["core FLOPs"] == 4 * 1024 * 256 * 64


def test_linear_attention_is_a_weighted_average():
    from course_lib.chapters.ch07_complexity import helpers as cx
    q, k = torch.randn(2, 1, 1, 6, 4, dtype=torch.float64).unbind(0)
    v = torch.ones(1, 1, 6, 3, dtype=torch.float64)
    torch.testing.assert_close(cx.linear_attention(q, k, v), torch.ones(1, 1, 6, 3,
                                                                         dtype=torch.float64))


def test_cliff_table_marks_measured_numbers():
    from course_lib.chapters.ch07_complexity import helpers as cx
    recs = [{"impl": i, "n": n, "peak_bytes": 2**20 * n, "gflops_per_s": 10.0, "flops": 10**9,
             "user_seconds": 0.1, "system_seconds": 0.05, "seconds": 0.15}
            for i in ("reference", "sdpa") for n in (256, 4096)]
    rows = cx.cliff_table(recs, {"L2": 2**20, "L3": 2**30})
    assert [r["fits in"] for r in rows] == ["L3", "DRAM"]
    assert all(v.startswith("≃") for r in rows for key, v in r.items()
               if key not in ("n", "fits in"))


def test_patchify_is_a_strided_convolution():
    from course_lib.chapters.ch07_complexity import vision
    x = torch.randn(2, 3, 12, 8, dtype=torch.float64)
    w = torch.randn(5, 3, 4, 4, dtype=torch.float64)
    tokens = vision.patchify(x, 4)
    assert tokens.shape == (2, 3 * 2, 3 * 16)
    conv = torch.nn.functional.conv2d(x, w, stride=4).flatten(2).transpose(1, 2)
    torch.testing.assert_close(tokens @ w.reshape(5, -1).T, conv)
    assert torch.equal(tokens[0, 1], x[0, :, 0:4, 4:8].reshape(-1))   # row-major patch order
    with pytest.raises(ValueError, match="patch=5 must divide H=12"):
        vision.patchify(x, 5)


def test_window_masks_and_swin_flops():
    from course_lib.chapters.ch07_complexity import vision
    plain = vision.window_mask_2d(8, 12, 4)
    assert plain.sum() == 8 * 12 * 16 and torch.equal(plain, plain.T)
    ids = vision.window_ids(8, 12, 4).view(8, 12)
    assert ids.unique().numel() == 6 and (ids[:4, :4] == ids[0, 0]).all()
    shifted = vision.window_ids(8, 8, 4, shift=2).view(8, 8)
    assert shifted.unique().numel() == 9                  # 3 x 3 windows, the edges partial
    assert shifted[1, 1] != shifted[2, 2] and shifted[2, 2] == shifted[5, 5]
    f = vision.swin_flops(56, 56, 96, 7)
    n, C = 56 * 56, 96
    assert f == {"global": 2 * (4 * n * C * C + 2 * n * n * C),
                 "windowed": 2 * (4 * n * C * C + 2 * 49 * n * C)}
    x = torch.randn(16 * 16, 8)
    assert cx.count_flops(vision.windowed_scores_and_mix, x, 16, 16, 4) == 4 * 16 * 256 * 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_sweep_measures_memory_in_a_fresh_process():
    """The chapter's sweep (memory="fresh"): every point in one fresh process, where the naive
    path's peak is its (1, 8, n, n) temporaries: x4 per doubling of n. (At n = 256, measured
    first, one-off allocations of a few MiB can still show: 10.4 MiB once in a make test run,
    6 MiB otherwise; from 512 on they are a small share.)"""
    impls = {"reference": reference.scaled_dot_product_attention}
    recs = cx.sweep(impls, ns=(512, 1024), heads=8, d=64, repeats=1, min_total_s=0.0,
                    progress=False, memory="fresh")
    small, large = (r["peak_bytes"] for r in recs)
    one_scores = cx.score_matrix_bytes(1024, heads=8)
    assert 3.5 < large / small < 4.5 and 1.5 * one_scores <= large <= 4.5 * one_scores
    with pytest.raises(ValueError, match="benchmark's own"):
        cx.sweep({"reference": lambda q, k, v: q}, ns=(8,), memory="fresh", progress=False)
    with pytest.raises(ValueError, match="memory must be"):
        cx.sweep(impls, ns=(8,), memory="subprocess", progress=False)
