"""Chapter 11: every flex mask_mod / score_mod equals the course's dense implementation, the
BlockMask's tile counts equal the dense tile map, and the exercise's mistakes model real mods."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from torch.nn.attention.flex_attention import (
    create_block_mask,
    create_mask,
    flex_attention,
)

from course_lib.attention import masks, positions, reference
from course_lib.chapters.ch11_flex_attention import bench, exercises, explorer
from course_lib.chapters.ch11_flex_attention import helpers as h

PROBLEMS = [h.Problem(L=64, S=64), h.Problem(B=3, H=2, L=24, S=40, E=8, seed=3),
            h.Problem(B=1, H=3, L=37, S=37, E=4, seed=5)]


@pytest.mark.parametrize("name", list(h.VARIANTS))
@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: f"L{p.L}-S{p.S}")
def test_every_variant_equals_the_course_dense_implementation_in_float64(name, p):
    var = h.VARIANTS[name]
    if var.square and p.L != p.S:
        pytest.skip("this variant is defined for L == S")
    q, k, v = p.qkv(torch.float64)
    flex = h.run_flex(var, p, q, k, v)
    dense = var.dense(p, q, k, v)
    assert flex.dtype == torch.float64 and flex.shape == dense.shape
    assert (flex - dense).abs().max() < 1e-12


@pytest.mark.parametrize("align", masks.ALIGNMENTS)
def test_causal_mod_is_the_course_causal_mask_in_each_alignment(align):
    for L, S in ((5, 9), (9, 5), (7, 7), (1, 6)):
        mod = h.causal_mod(L, S, align)
        got = create_mask(mod, None, None, L, S, device="cpu")[0, 0]
        assert torch.equal(got, masks.causal_mask(L, S, align=align)), (L, S)
    assert not torch.equal(create_mask(h.causal_mod(3, 6, "top_left"), None, None, 3, 6, "cpu"),
                           create_mask(h.causal_mod(3, 6, "bottom_right"), None, None, 3, 6,
                                       "cpu"))


def test_each_mask_mod_is_the_dense_mask():
    L, S = 10, 10
    tokens = torch.tensor([[4, 5, 6, 0, 0, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0]])

    def dense(mod, B=None):
        return create_mask(mod, B, None, L, S, device="cpu")

    assert torch.equal(dense(h.padding_mod(tokens), 2),
                       masks.padding_mask(tokens).expand(2, 1, L, S))
    for w in (1, 3, 10, 12):
        assert torch.equal(dense(h.sliding_window_mod(L, S, w))[0, 0],
                           masks.sliding_window_mask(L, S, w))
    ids = h.document_ids([3, 1, 6])
    assert torch.equal(dense(h.document_mod(ids))[0, 0], h.document_mask(ids))
    prefix = torch.tensor([4, 0])
    assert torch.equal(dense(h.prefix_lm_mod(prefix), 2), h.prefix_lm_mask(prefix, S))


def test_dense_truths_by_hand():
    ids = h.document_ids([2, 3])
    assert ids.tolist() == [0, 0, 1, 1, 1]
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0],
                             [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(h.document_mask(ids), expected)
    pl = h.prefix_lm_mask(torch.tensor([2]), 4)[0, 0]
    assert pl.tolist() == [[True, True, False, False], [True, True, False, False],
                           [True, True, True, False], [True, True, True, True]]
    for bad in ([], [2, 0], [[1, 2]]):
        with pytest.raises(ValueError, match="lengths"):
            h.document_ids(bad)


def test_alibi_mod_is_the_course_alibi_bias():
    H, L, S = 5, 4, 7
    mod = h.alibi_mod(H, L, S)
    b = torch.zeros(())
    hh = torch.arange(H)[:, None, None]
    qi = torch.arange(L)[None, :, None]
    ki = torch.arange(S)[None, None, :]
    got = mod(torch.zeros(H, L, S), b, hh, qi, ki)
    assert torch.allclose(got, positions.alibi_bias(H, L, S), atol=1e-6)


def test_softcap_squashes_smoothly_and_rejects_a_bad_cap():
    mod = h.softcap_mod(5.0)
    s = torch.linspace(-100, 100, 2001, dtype=torch.float64)
    out = mod(s, None, None, None, None)
    assert out.abs().max() <= 5.0 and torch.all(out.diff() >= 0)    # bounded, increasing
    assert torch.all(out[900:1101].diff() > 0) and out[900:1101].abs().max() < 5.0
    assert torch.allclose(out, -mod(-s, None, None, None, None))      # odd
    small = torch.tensor([0.01, -0.02], dtype=torch.float64)
    assert torch.allclose(mod(small, None, None, None, None), small, rtol=1e-5)
    with pytest.raises(ValueError, match="cap"):
        h.softcap_mod(0.0)


def test_and_masks_is_the_logical_and():
    mod = h.and_masks(h.causal_mod(6, 6), h.sliding_window_mod(6, 6, 2))
    got = create_mask(mod, None, None, 6, 6, device="cpu")[0, 0]
    assert torch.equal(got, masks.sliding_window_mask(6, 6, 2))


# --------------------------------------------------------------------------- tiles


def test_tile_map_of_a_ragged_mask_by_hand():
    m = torch.zeros(5, 6, dtype=torch.bool)
    m[:4, :4] = True        # tile (0, 0) full
    m[4, 5] = True          # tile (1, 1): one pair, and padded (it could never be full)
    t = h.tile_map(m, 4)
    assert t.tolist() == [[2, 0], [0, 1]]
    assert h.dense_tile_counts(m, 4) == h.Tiles(full=1, partial=1, skipped=2)
    assert h.tile_map(torch.ones(5, 6, dtype=torch.bool), 4).tolist() == [[2, 1], [1, 1]]
    with pytest.raises(ValueError, match="tile_map"):
        h.tile_map(torch.ones(2, 3, 4, dtype=torch.bool), 2)


@pytest.mark.parametrize("block", [4, 8, 16, 32])
def test_blockmask_counts_equal_the_dense_tile_map(block):
    for label in h.TILE_CASES:
        mask, tiles = h.tile_case(label, block)       # raises if they disagree
        assert tiles == h.dense_tile_counts(mask, block)
        assert tiles.total == -(-mask.shape[0] // block) * -(-mask.shape[1] // block)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_causal_skips_the_tiles_above_the_diagonal(n):
    block = 16
    L = n * block
    bm = create_block_mask(h.causal_mod(L, L), None, None, L, L, device="cpu", BLOCK_SIZE=block)
    t = h.tile_counts(bm)
    assert t == h.Tiles(full=n * (n - 1) // 2, partial=n, skipped=n * (n - 1) // 2)
    assert t.skipped_fraction == pytest.approx(bm.sparsity() / 100)     # torch's own count


def test_tile_table_rows_and_the_order_the_chapter_asserts():
    rows = {r["mask"]: r for r in h.tile_table(16)}
    assert set(rows) == set(h.TILE_CASES)
    for r in rows.values():
        assert r["full"] + r["partial"] + r["skipped"] > 0
        assert 0 <= r["skipped_fraction"] <= 1
    assert rows["causal, top-left (L=32, S=64)"]["skipped"] == 5
    assert rows["causal, bottom-right (L=32, S=64)"]["skipped"] == 1


# --------------------------------------------------------------------------- exercises


def _learner_off_by_one(q, k, v, lengths):
    """What a learner writes: document of token t = searchsorted(ends, t) (right=False)."""
    ends = torch.cumsum(lengths, 0)

    def mod(b, hh, q_idx, kv_idx):
        return (torch.searchsorted(ends, q_idx) == torch.searchsorted(ends, kv_idx)) \
            & (kv_idx <= q_idx)
    L = q.shape[-2]
    return flex_attention(q, k, v, block_mask=create_block_mask(mod, None, None, L, L, "cpu"))


def test_the_off_by_one_mistake_is_what_a_searchsorted_mod_computes():
    gen = torch.Generator().manual_seed(0)
    for case in exercises.DOCUMENT_ATTENTION.cases(gen):
        mistake = exercises._doc_off_by_one(*case.args)
        assert torch.allclose(_learner_off_by_one(*case.args), mistake, atol=1e-5)
        assert not torch.allclose(exercises.DOCUMENT_ATTENTION.oracle(*case.args), mistake,
                                  atol=1e-3)


def test_the_solutions_run_flex_and_match_the_oracles():
    for ex in (exercises.DOCUMENT_ATTENTION, exercises.SOFTCAP_ATTENTION):
        for case in ex.cases(torch.Generator().manual_seed(1)):
            got = ex.solution(*case.args)
            assert torch.allclose(got, ex.oracle(*case.args), atol=1e-5), (ex.id, case.name)


def test_cap_after_softmax_differs_from_capping_the_scores():
    gen = torch.Generator().manual_seed(2)
    for case in exercises.SOFTCAP_ATTENTION.cases(gen):
        right = exercises._softcap_oracle(*case.args)
        wrong = exercises._cap_after_softmax(*case.args)
        assert (right - wrong).abs().max() > 1e-2, case.name


# --------------------------------------------------------------------------- bench, explorer


def test_bench_mask_mods_are_the_course_masks():
    L = 64
    mods = bench.mask_mods(L)
    dense = {name: create_mask(m, None, None, L, L, device="cpu")[0, 0]
             for name, m in mods.items()}
    assert torch.equal(dense["causal"], masks.causal_mask(L))
    assert torch.equal(dense["sliding window (L/8)"], masks.sliding_window_mask(L, L, L // 8))
    assert torch.equal(dense["documents (4)"], h.document_mask(h.document_ids([L // 4] * 4)))


def test_committed_bench_results_render():
    data = h.load_bench_results()
    rows = h.bench_rows(data)
    assert rows and len(rows) == len(data["results"])
    for r, raw in zip(rows, data["results"], strict=True):
        assert r["flex compiled (ms)"] == pytest.approx(1e3 * raw["seconds_flex_compiled"])
        assert raw["max_abs_diff_compiled"] < 1e-4 and raw["max_abs_diff_eager"] < 1e-4
        assert raw["compile_seconds_wall"] > 0


def test_explorer_draws_every_frame_with_torch_counts():
    ex = explorer.block_mask_explorer()
    frames = ex.player_frames()
    assert len(frames) == len(h.TILE_CASES) + len(explorer.BLOCKS) - 1
    for f in frames[:2] + frames[-1:]:
        fig = plt.figure()
        counts = explorer.draw_tiles(fig, **f)
        _, tiles = h.tile_case(f["mask"], f["block"])
        assert counts == {"full": tiles.full, "partial": tiles.partial, "skipped": tiles.skipped}
        plt.close(fig)


def test_reference_still_agrees_with_flex_on_a_plain_call():
    q, k, v = h.Problem(L=16, S=16).qkv(torch.float64)
    assert (flex_attention(q, k, v) - reference.scaled_dot_product_attention(q, k, v)
            ).abs().max() < 1e-12


def test_speed_against_density_figure_plots_every_committed_row():
    from course_lib.chapters.ch11_flex_attention import plots

    runs = {"cpu": h.load_bench_results(), "gpu": h.load_bench_results("flex-cuda.json")}
    made = {"causal": {"tiles_skipped_fraction": 0.25, "seconds_flex_compiled": 3.0,
                       "seconds_sdpa_dense": 4.0, "mask": "causal"}}
    point = plots.speed_vs_density({"results": list(made.values())})
    assert point == [{"mask": "causal", "density": 0.75, "time vs dense SDPA": 0.75}]
    fig, ax = plt.subplots()
    plots.plot_speed_vs_density(ax, runs)
    drawn = sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0]))
                   for line in ax.lines if line.get_linestyle() == "None")
    want = sorted((p["density"], p["time vs dense SDPA"])
                  for data in runs.values() for p in plots.speed_vs_density(data))
    assert len(want) == 6 and [x for pt in drawn for x in pt] == pytest.approx(
        [x for pt in want for x in pt])
    plt.close(fig)
