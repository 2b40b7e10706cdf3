"""Chapter 10's latent-attention tools: the cache table agrees with the core's byte counts, the
FLOP formulas agree with torch's FLOP counter on the core's decode paths, the break-even points
are where the formulas cross, and the figures and the explorer draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from course_lib.attention import KVCache, MultiHeadLatentAttention
from course_lib.attention.kv_cache import kv_cache_bytes
from course_lib.attention.latent import mla_cache_bytes
from course_lib.chapters.ch10_inference import explorer, helpers, plots

SMALL = {"heads": 4, "kv_lora_rank": 12, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4,
         "v_head_dim": 5}


def test_scheme_rows_follow_the_core_byte_counts():
    rows = {r["scheme"]: r for r in helpers.scheme_rows(tokens=1000, bytes_per_element=2)}
    llama, v3 = helpers.LLAMA3_70B, helpers.DEEPSEEK_V3
    assert rows["GQA"]["KiB/token"] * 1024 == kv_cache_bytes(1, 80, 8, 128)
    assert rows["MHA"]["KiB/token"] * 1024 == kv_cache_bytes(1, 80, llama["heads"], 128)
    assert rows["MQA"]["KiB/token"] * 1024 == kv_cache_bytes(1, 80, 1, 128)
    assert rows["MLA"]["KiB/token"] * 1024 == mla_cache_bytes(1, 61, 512, 64) == 70272
    assert rows["MLA decompressed"]["KiB/token"] * 1024 == 61 * 128 * (128 + 64 + 128) * 2
    assert rows["MLA"]["GiB at 1,000 tokens"] == mla_cache_bytes(1000, 61, 512, 64) / 2**30
    assert v3["kv_lora_rank"] == 512 and v3["layers"] == 61 and llama["kv_heads"] == 8


def _flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("S", [1, 9])
def test_decode_flop_formulas_match_torchs_counter(S):
    torch.manual_seed(0)
    cfg = SMALL
    m = MultiHeadLatentAttention(16, cfg["heads"], kv_lora_rank=12, qk_nope_head_dim=6,
                                 qk_rope_head_dim=4, v_head_dim=5, implementation="reference")
    x = torch.randn(1, S, 16)
    cache = KVCache()
    with torch.no_grad():
        m(x, cache)
        q_nope, q_rope = m.queries(x[:, -1:], S - 1)
        c, k_rope = cache.view()
        naive = _flops(lambda: m._naive(q_nope, q_rope, c, k_rope, None, False))
        absorbed = _flops(lambda: m._absorbed(q_nope, q_rope, c, k_rope, None))
    costs = helpers.mla_decode_costs(cfg, S)
    assert naive == costs["naive"]["FLOPs"]
    assert absorbed == costs["absorbed"]["FLOPs"]


def test_break_even_points_are_where_the_formulas_cross():
    cfg = helpers.DEEPSEEK_V3
    s = helpers.absorbed_break_even(cfg)
    below, above = (helpers.mla_decode_costs(cfg, n) for n in (int(s), int(s) + 1))
    assert below["absorbed"]["FLOPs"] > below["naive"]["FLOPs"]
    assert above["absorbed"]["FLOPs"] < above["naive"]["FLOPs"]
    S = 4096
    q = helpers.decompress_wins_above(cfg, S)

    def per_step(L):   # L query tokens over S latents: absorbed vs decompress once
        c = helpers.mla_decode_costs(cfg, S)
        absorbed = L * c["absorbed"]["FLOPs"]
        decompress = c["naive"]["FLOPs"] + (L - 1) * c["decompressed cache"]["FLOPs"]
        return absorbed - decompress
    assert per_step(int(q)) < 0 < per_step(int(q) + 1)


def test_absorbed_intensity_sits_between_the_gpu_ridges():
    i = helpers.mla_decode_costs(helpers.DEEPSEEK_V3, 8192)["absorbed"]["FLOP/byte"]
    ridges = {k: p / b for k, (p, b) in helpers.GPU_DATASHEETS.items()}
    assert ridges["A100 SXM 80GB, bf16"] < i < ridges["H100 SXM, bf16"]


def test_torch_groups_in_place_unless_value_width_differs():
    assert helpers.aten_ops(F.scaled_dot_product_attention) == [
        "_scaled_dot_product_flash_attention_for_cpu"]
    assert helpers.kv_copies(F.scaled_dot_product_attention, Ev=4) == []
    assert helpers.kv_copies(F.scaled_dot_product_attention, Ev=6)


def test_figures_and_explorer_draw_every_scheme():
    fig, ax = plt.subplots()
    plots.plot_scheme_cache(ax, helpers.scheme_rows())
    assert len(ax.patches) == 5 and len({p.get_hatch() for p in ax.patches}) == 5
    plt.close(fig)
    ex = explorer.cache_schemes_explorer()
    fig = ex.render(context=8192, dtype="fp8")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [label.split(":")[0] for label in labels] == ["MHA", "GQA", "MQA", "MLA"]
    assert "MLA: 0.268 GiB at 8,192" in labels               # 61 · 576 · 1 byte · 8192
    plt.close(fig)
    got = explorer.draw_cache_schemes(plt.figure(), context=1024, dtype="fp32")
    assert got["GQA"] == 1024 * 2 * 80 * 8 * 128 * 4 / 2**30
    plt.close("all")
    fig, ax = plt.subplots()
    plots.plot_mla_decode_times(ax, [{"cache": 8, "naive ms": 2.0, "absorbed ms": 1.0},
                                     {"cache": 16, "naive ms": 4.0, "absorbed ms": 1.5}])
    assert len(ax.lines) == 2
    plt.close(fig)
