"""Flash chapter: byte counts, the traced tile loop, shape recording, recomputed backward,
figures and the tile explorer (drawn headlessly)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib import flash, reference
from course_lib.chapters.ch08_flash import explorer as flash_widgets
from course_lib.chapters.ch08_flash import helpers as flash_tools
from course_lib.chapters.ch08_flash import plots as flash_plots


def test_byte_counts_and_intensity():
    assert flash_tools.naive_bytes(10, 2) == 4 * (4 * 100 + 4 * 20)
    assert flash_tools.flash_bytes(10, 2, block_q=5) == 4 * (2 * 20 + 2 * 20 * 2)
    # naive intensity tends to d/4 (every score written and read twice), tiled to B_q/2
    assert flash_tools.arithmetic_intensity(2**20, 64) == pytest.approx(16, rel=1e-3)
    assert flash_tools.arithmetic_intensity(2**20, 64, "flash", 128) == pytest.approx(64,
                                                                                     rel=1e-3)
    with pytest.raises(ValueError):
        flash_tools.arithmetic_intensity(8, 8, "other")


@pytest.mark.parametrize("causal", [False, True])
def test_tile_trace_ends_at_attention_and_tracks_running_max(causal):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(10, 3, generator=g, dtype=torch.float64) for _ in range(3))
    steps = flash_tools.tile_trace(q, k, v, 4, 3, causal=causal)
    n_tiles = sum(1 for i0 in range(0, 10, 4) for j0 in range(0, 10, 3)
                  if not (causal and j0 > min(i0 + 4, 10) - 1))
    assert len(steps) == n_tiles
    last = steps[-1]
    torch.testing.assert_close(last.O / last.ell[:, None],
                               reference.scaled_dot_product_attention(q, k, v, is_causal=causal))
    scores = (q @ k.T) / math.sqrt(3)
    if causal:
        scores = scores.masked_fill(torch.ones(10, 10, dtype=torch.bool).triu(1), -math.inf)
    for st in steps:  # m of the current rows = max over the key columns seen so far
        (i0, i1), (_, j1) = st.rows, st.cols
        torch.testing.assert_close(st.m[i0:i1], scores[i0:i1, :j1].amax(dim=-1))
        torch.testing.assert_close(st.ell[i0:i1],
                                   torch.exp(scores[i0:i1, :j1] - st.m[i0:i1, None]).sum(-1))


def test_online_softmax_trace_matches_direct_statistics():
    blocks = [torch.tensor([1.0, 3.0]), torch.tensor([7.0, -2.0]), torch.tensor([5.0])]
    m, ell = flash_tools.online_softmax_trace(blocks)[-1]
    x = torch.cat(blocks)
    assert m == 7.0
    assert ell == pytest.approx(float(torch.exp(x - 7.0).sum()))
    assert flash_tools.online_softmax_trace(blocks)[0][0] == 3.0


def test_shape_recorder_sees_naive_square_but_not_flash():
    q, k, v = (torch.randn(1, 1, 300, 8) for _ in range(3))
    naive = flash_tools.created_shapes(reference.scaled_dot_product_attention, q, k, v)
    tiled = flash_tools.created_shapes(flash.scaled_dot_product_attention, q, k, v,
                                       block_size=64)
    assert flash_tools.has_square_tensor(naive, 300, 300)
    assert not flash_tools.has_square_tensor(tiled, 300, 300)
    assert math.prod(flash_tools.largest_created(tiled)[1]) <= 64 * 64 * 8
    assert flash_tools.has_square_tensor([("x", (2, 5, 7))], 7, 5)
    assert not flash_tools.has_square_tensor([("x", (2, 5, 9))], 7, 5)


def test_explorer_frames_show_trace_and_final_output():
    ex = flash_widgets.tile_explorer()
    labels = [f["tile"] for f in ex.player_frames()]
    assert len(labels) == 15  # 3×3 full tiles, then the 6 causal tiles that exist
    assert labels[8] == "full 9/9" and labels[9] == "causal 1/6" and labels[-1] == "causal 6/6"
    assert len(flash_widgets.trace(True)) == 6
    q, k, v = flash_widgets.example_qkv()
    for causal, last in ((False, "full 9/9"), (True, "causal 6/6")):
        fig = ex.render(tile=last)                 # the last frame: the whole output
        o_ax = fig.axes[3]
        shown = np.asarray(o_ax.images[0].get_array())
        expected = reference.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()
        np.testing.assert_allclose(shown, expected, rtol=1e-10)
        plt.close(fig)
    fig = ex.render(tile="full 1/9")
    shown_scores = np.ma.filled(fig.axes[0].images[0].get_array(), np.nan)
    assert np.isfinite(shown_scores).sum() == 16  # only the first 4×4 tile has been seen
    m_texts = [t.get_text() for t in fig.axes[1].texts]
    st = flash_widgets.state(1)
    assert m_texts[:4] == [f"{x:.2f}" for x in st["m"][:4]] and m_texts[4:] == ["–"] * 8
    plt.close(fig)


def test_figures_draw():
    fig, axes = plt.subplots(1, 3)
    flash_plots.intensity_plot(axes[0], [256, 512], 64, 128, {"cpu": 10.0})
    counts = flash_plots.tile_grid(axes[1], 8, 8, 4, 2, causal=True)
    assert counts == {"full": 2, "diagonal": 4, "skipped": 2}  # 2 row blocks × 4 col blocks
    rows = [{"impl": "flash", "n": n, "peak_extra_bytes": n * 2**20, "median_s": 1.0}
            for n in (2, 1)]
    series = flash_plots.memory_series(rows, ["flash", "sdpa"])
    assert series == {"flash": ([1, 2], [1.0, 2.0])}
    flash_plots.per_impl_vs_n(axes[2], series, "MiB", "t", guides={"×2": 1.0})
    assert len(axes[2].lines) == 2
    plt.close(fig)


def test_chapter_tables_and_growth():
    table = flash_tools.intensity_table([1024], 64, 128)
    assert f"{flash_tools.arithmetic_intensity(1024, 64):.1f}" in table
    blocks = [torch.tensor([0.0, 2.0]), torch.tensor([5.0])]
    text = flash_tools.online_softmax_table(blocks)
    assert "| 2 | 5.0000 | 5.0000 |" in text
    assert flash_tools.growth_per_doubling({1: 1.0, 4: 16.0}, 1, 4) == pytest.approx(4.0)


def test_causal_tile_counts():
    from course_lib.chapters.ch08_flash import helpers as ft
    assert ft.causal_tile_counts(1024, 1024, 512) == {"total": 2, "skipped": 0, "diagonal": 2,
                                                      "computed": 2}
    c = ft.causal_tile_counts(2048, 512, 512)
    assert (c["total"], c["skipped"], c["computed"], c["diagonal"]) == (16, 6, 10, 4)
    c = ft.causal_tile_counts(1000, 300, 128)                  # ragged edges
    assert c["computed"] + c["skipped"] == c["total"]


def test_round_times_reads_committed_run():
    from course_lib import bench
    from course_lib.chapters.ch08_flash import helpers as ft
    data = bench.load_results(bench.RESULTS_DIR / "cpu-float32.json")
    times = ft.round_times(data, "flash", 256)
    assert len(times) == data["meta"]["rounds"]
    row = next(r for r in data["results"]
               if r["impl"] == "flash" and r["n"] == 256 and not r["causal"])
    assert abs(sorted(times)[len(times) // 2] - row["median_s"] * 1e3) < 1e-3  # µs rounding


def test_gpu_regime_model_l2_versus_main_memory():
    """Re-reads served by L2 leave Q, K, V, O once in main memory (intensity ~ n/2 in bf16);
    charged to main memory they cap the intensity at B_q (bf16). Working set and tile sizes."""
    n, d = 16384, 64
    assert flash_tools.flash_bytes_l2(n, d, 2) == 2 * 4 * n * d
    assert flash_tools.arithmetic_intensity(n, d, "flash_l2", 128, 2) == n / 2
    assert abs(flash_tools.arithmetic_intensity(n, d, "flash", 128, 2) - 128) < 1
    # 16384 / 128 = 128 query blocks per head: 132 programs span 2 heads of K and V
    assert flash_tools.kv_working_set(n, d, 128) == 2 * 2 * n * d * 2
    assert flash_tools.kv_working_set(256, d, 128) == 66 * 2 * 256 * d * 2
    assert flash_tools.tile_smem_bytes(128, 64, 128) == 2 * (128 + 128) * 128
    table = flash_tools.gpu_regime_table([16384, 1 << 20], [128], [(128, 128)])
    lines = table.splitlines()
    assert len(lines) == 4 and "| L2 |" in lines[2] and "HBM (pessimistic)" in lines[3]
    assert lines[2].endswith("| above |") and lines[3].endswith("| below |")
    with pytest.raises(ValueError, match="flash_l2"):
        flash_tools.arithmetic_intensity(8, 8, "tiled")


# --------------------------------------------------------------------------- GPU sweeps


def _gpu_run(backward=False):
    """A two-length sweep by hand: known times, one out-of-memory row."""
    def row(impl, n, seconds=None, peak=None, oom=False):
        r = {"impl": impl, "n": n, "causal": False, "backward": backward, "flops": 1e12}
        if oom:
            return {**r, "skipped": "out of memory on cuda: CUDA out of memory",
                    "out_of_memory": True}
        return {**r, "median_s": seconds, "gflops_median": 1e3 / seconds,
                "frac_matmul": (1e3 / seconds) / 500e3, "peak_extra_bytes": peak}
    results = [row("reference", 1024, 0.1, 4 * 2**20), row("reference", 2048, oom=True),
               row("flash", 1024, 0.05, 2**20), row("flash", 2048, 0.2, 2 * 2**20),
               row("sdpa", 1024, 0.004, 2**19), row("sdpa", 2048, 0.016, 2**20),
               row("torch", 1024, 0.004, 2**19), row("torch", 2048, 0.016, 2**20)]
    meta = {"dtype": "bfloat16", "d": 128, "backward": backward, "batch": 4, "heads": 16,
            "rounds": 3, "device_name": "GPU", "multiprocessors": 132, "driver_version": "1.0",
            "torch_version": "2", "cuda_version": "13", "cudnn_version": 9,
            "timestamp_utc": "2026-11-26T00:00:00Z", "matmul": {"gflops_median": 500e3}}
    return {"meta": meta, "results": results}


def test_gpu_summaries_from_known_numbers():
    from course_lib.chapters.ch08_flash import gpu

    run = _gpu_run()
    assert gpu.tflops(run, "sdpa") == {1024: 250.0, 2048: 62.5}
    assert gpu.matmul_tflops(run) == 500.0
    assert gpu.fraction_of_matmul(run, "sdpa")[1024] == pytest.approx(0.5)
    assert gpu.time_ratio(run, "reference", "sdpa") == {1024: pytest.approx(25.0)}  # 2048: OOM
    assert gpu.time_ratio(run, "flash", "sdpa")[2048] == pytest.approx(12.5)
    assert gpu.peak_mib(run, "flash") == {1024: 1.0, 2048: 2.0}
    assert gpu.out_of_memory(run, "reference") == [2048] and gpu.out_of_memory(run, "flash") == []
    series, failed, ceiling = gpu.rate_series(run)
    assert series["reference"] == [(1024, 10.0)] and failed["reference"] == [2048]
    assert ceiling == 500.0
    table = gpu.summary_table({("bfloat16", 128, False): run}, n=2048)
    assert "| bfloat16 | 128 | forward | 500 | out of memory | 5.0 | 62.5 | 62.5 | 0.12 |" in table
    from course_lib.toolkit.bench import describe_run

    assert "GPU (132 SMs), driver 1.0, CUDA 13, cuDNN 9" in describe_run(
        {**run, "meta": {**run["meta"], "device": "cuda:0", "threads": 16}})


def test_committed_gpu_sweeps_cover_the_grid():
    from course_lib.chapters.ch08_flash import gpu

    runs = gpu.gpu_runs()
    assert set(runs) == {(dt, e, b) for dt in ("bfloat16", "float16") for e in (64, 128)
                         for b in (False, True)}
    for (dtype, e, backward), run in runs.items():
        m = run["meta"]
        assert (m["dtype"], m["d"], m["backward"]) == (dtype, e, backward)
        assert m["device"].startswith("cuda") and m["batch"] == 4 and m["heads"] == 16
        assert m["ns"] == [512, 1024, 2048, 4096, 8192, 16384] and m["causal"] == [False, True]
        assert m["driver_version"] and m["cuda_version"] and m["cudnn_version"]
        assert gpu.matmul_tflops(run) > 0
        for impl in ("flash", "sdpa", "torch"):   # every length ran, causal or not
            for causal in (False, True):
                assert sorted(gpu.tflops(run, impl, causal)) == m["ns"], (dtype, e, impl)


def test_rate_plot_draws_series_ceiling_and_failures():
    from course_lib.toolkit.plotting import rate_plot

    fig, ax = plt.subplots()
    rate_plot(ax, {"a": [(2048, 3.0), (1024, 1.0)], "b": []}, 10.0, failed={"a": [4096]},
              colors={"a": "#123456"})
    lines = ax.get_lines()
    assert list(lines[0].get_xdata()) == [1024, 2048]          # sorted by n
    assert list(lines[1].get_xdata()) == [4096] and lines[1].get_marker() == "x"
    assert lines[2].get_ydata()[0] == 10.0                      # the ceiling
    assert ax.get_ylim()[1] == pytest.approx(11.2) and ax.get_xscale() == "log"
    plt.close(fig)
