"""Chapter 13's tools: the FLOP and memory meter, the cost model, the figures and the explorer
(the ring itself: test_ring_attention.py, test_ulysses.py; the exercises: the exercise tests)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from course_lib.chapters.ch13_across_devices import explorer, helpers, plots

matplotlib.use("Agg")


def test_meter_counts_matmul_flops_and_peak_tensor_bytes():
    a, b = torch.randn(3, 5, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    x = torch.randn(2, 3, 5), torch.randn(2, 5, 4)
    with helpers.Meter() as m:
        c = a @ b                       # 3·7 float64 = 168 bytes, 2·3·5·7 FLOPs
        d = torch.bmm(*x)               # 2·3·4 float32 = 96 bytes, 2·2·3·5·4 FLOPs
        view = c[1:]                    # a view: no new storage
        del c, d                        # c's storage lives on in the view, d's is freed
        e = torch.empty(50, dtype=torch.float64)   # 400 bytes: live 168 + 400
    assert m.flops == 2 * 3 * 5 * 7 + 2 * 2 * 3 * 5 * 4
    assert m.peak == 168 + 400 and m.live == 168 + 400
    del view, e
    assert m.live == 0                  # freed storages are subtracted when they die


def test_meter_ignores_inputs_and_in_place_results():
    x = torch.zeros(100)
    with helpers.Meter() as m:
        x.add_(1.0)                     # in place: the input's storage, allocated before
        y = x[:10]                      # a view of the input
    assert m.peak == 0 and y.sum() == 10


def test_overlap_threshold_is_where_transfer_time_equals_compute_time():
    rate, bw, b = 1e15, 4e11, 2
    c = helpers.min_shard_to_hide(rate, bw, b)
    cost = helpers.ring_step_cost(seq=int(8 * c), world=8, heads=16, dim=64,
                                  bytes_per_element=b)
    assert cost["flops"] / rate == pytest.approx(cost["bytes"] / bw, rel=1e-12)
    longer = helpers.ring_step_cost(seq=int(16 * c), world=8, heads=16, dim=64,
                                    bytes_per_element=b)
    assert longer["flops"] / rate > longer["bytes"] / bw      # twice as long: hidden


def test_bytes_sent_ring_against_ulysses():
    args = (4096, 64, 128, 2)
    assert helpers.bytes_sent_per_rank("ring", args[0], 1, *args[1:]) == 0
    for w in (2, 4, 8):
        ring = helpers.bytes_sent_per_rank("ring", args[0], w, *args[1:])
        uly = helpers.bytes_sent_per_rank("ulysses", args[0], w, *args[1:])
        shard = args[0] / w * 64 * 128 * 2
        assert ring == (w - 1) * 2 * shard and uly == pytest.approx(ring * 2 / w)
    with pytest.raises(ValueError, match="method must be"):
        helpers.bytes_sent_per_rank("allgather", *args[:1], 2, *args[1:])


@pytest.mark.parametrize(("world", "expected"), [(2, 4.5), (4, 2.25), (8, 1.125)])
def test_ulysses_sends_queries_and_outputs_at_every_query_head(world, expected):
    # 64 query heads, 8 key/value heads (Llama 3 70B): Ulysses / ring = (1 + H/H_kv) / W
    ring = helpers.bytes_sent_per_rank("ring", 4096, world, 64, 128, 2, kv_heads=8)
    uly = helpers.bytes_sent_per_rank("ulysses", 4096, world, 64, 128, 2, kv_heads=8)
    shard = 4096 / world * 128 * 2
    assert ring == (world - 1) * 2 * 8 * shard                       # K and V at 8 heads
    assert uly == pytest.approx((world - 1) / world * (2 * 64 + 2 * 8) * shard)
    assert uly / ring == pytest.approx(expected, rel=1e-12)


def test_backward_step_needs_shards_six_fifths_as_long_to_hide():
    fwd = helpers.ring_step_cost(8192, 4, 32, 128, 2, kv_heads=8)
    bwd = helpers.ring_step_cost(8192, 4, 32, 128, 2, kv_heads=8, backward=True)
    c = 8192 / 4
    assert bwd["flops"] == 10 * c * c * 32 * 128 and fwd["flops"] == 4 * c * c * 32 * 128
    assert bwd["bytes"] == 2 * c * 8 * 128 * (2 + 4)      # K, V in bf16 + dK, dV in float32
    assert (bwd["bytes"] / fwd["bytes"]) / (bwd["flops"] / fwd["flops"]) == pytest.approx(1.2)


@pytest.mark.parametrize("world", (2, 3, 4, 8))
def test_work_per_rank(world):
    assert helpers.work_per_rank(world, layout="contiguous") == list(range(1, world + 1))
    assert helpers.work_per_rank(world, layout="zigzag") == [(2 * world + 1) / 4] * world
    assert helpers.work_per_rank(world, layout="zigzag", is_causal=False) == [world] * world


@pytest.mark.parametrize("world", (2, 3, 4, 8))
def test_work_per_rank_with_tile_skipping(world):
    # a flash kernel skips the tiles above the diagonal: a diagonal block costs half a block
    contiguous = helpers.work_per_rank(world, layout="contiguous", kernel="tile-skipping")
    assert contiguous == [r + 0.5 for r in range(world)]
    assert contiguous[-1] / contiguous[0] == 2 * world - 1
    assert helpers.work_per_rank(world, layout="zigzag", kernel="tile-skipping") \
        == [world / 2] * world
    assert helpers.work_per_rank(world, layout="zigzag", is_causal=False,
                                 kernel="tile-skipping") == [world] * world
    with pytest.raises(ValueError, match="kernel must be one of"):
        helpers.work_per_rank(world, layout="zigzag", kernel="flash")


def test_datasheet_numbers_are_labelled_with_sources():
    for name, d in helpers.DATASHEET.items():
        assert d["value"] > 0 and d["unit"] and "datasheet" in d["source"].lower() \
            or "NDR" in d["source"], name
    assert helpers.DATASHEET["NVLink 4 (H100 SXM)"]["value"] == 450e9


def test_ring_schedule_figure_colours_each_pair_by_its_kind():
    fig, ax = plt.subplots()
    plots.plot_ring_schedule(ax, 4, is_causal=True, layout="zigzag")
    colours = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches]
    assert len(colours) == 4 * 4 * 4                       # ranks × steps × 2×2 pairs
    kinds = {k: colours.count(matplotlib.colors.to_hex(c))
             for k, c in plots.KIND_COLOURS.items()}
    # per rank: 2 diagonals, 2W - 1 = 7 full pairs, the other 16 - 9 = 7 skipped
    assert kinds == {"diagonal": 8, "full": 28, "skipped": 28}
    plt.close(fig)


def test_explorer_work_after_the_last_step_is_the_schedule_total():
    for layout in ("contiguous", "zigzag"):
        fig = plt.figure()
        work = explorer.draw_ring(fig, step=3, ranks=4, causal="causal", layout=layout)
        plt.close(fig)
        assert work == helpers.work_per_rank(4, layout=layout)
    fig = plt.figure()
    assert explorer.draw_ring(fig, step=3, ranks=2, causal="none", layout="contiguous") \
        == [2.0, 2.0]                                      # step clamped to the last, W - 1
    plt.close(fig)


def test_explorer_frames_and_text_alternative():
    ex = explorer.ring_explorer()
    assert len(ex.player_frames()) == 8
    assert ex.defaults()["layout"] == "contiguous"             # what the text starts with
    assert [f["layout"] for f in ex.player_frames()] == ["contiguous"] * 4 + ["zigzag"] * 4
    text = explorer.describe({"step": 0, "layout": "contiguous"})
    assert text == ("Ring attention on 4 ranks, contiguous shards, causal, after step 0: blocks "
                    "computed so far per rank rank 0 1, rank 1 1, rank 2 1, rank 3 1.")


def test_explorer_fits_a_phone_column():
    # stacked panels, at most 360 px wide in the book's player, its smallest text >= 10.5 px
    ex = explorer.ring_explorer()
    fig = ex.render()
    top, bottom = fig.axes
    assert top.get_position().y0 > bottom.get_position().y1    # one above the other
    plt.close(fig)
    assert ex.figsize[0] * ex.player_dpi() <= 360
    assert ex.smallest_text_pt() * ex.player_dpi() / 72 >= 10.5
