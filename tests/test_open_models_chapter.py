"""Chapter 14's helpers: the configuration table computed from the published fields, the decode
cost model, the learned-sink experiment's claims on another seed, the explorer and the figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from course_lib.chapters.ch14_open_models import explorer, helpers, plots

MODELS = {m["name"]: m for m in helpers.load_configs()}


def test_every_model_names_its_source_and_its_fields():
    assert set(MODELS) == {"gpt-oss-120b", "Qwen3-32B", "Gemma 3 27B", "Qwen3-Next-80B-A3B"}
    for m in MODELS.values():
        assert m["source"].startswith("https://huggingface.co/") and "config.json" in m["source"]
        for field in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                      "head_dim"):
            assert isinstance(m["config"][field], int)


def test_layer_kinds_follow_the_published_pattern_fields():
    kinds = {n: helpers.layer_kinds(m["config"]) for n, m in MODELS.items()}
    assert kinds["Gemma 3 27B"][:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert kinds["Gemma 3 27B"].count("full_attention") == 10          # layers 5, 11, ..., 59
    assert kinds["Qwen3-Next-80B-A3B"].count("linear_attention") == 36
    assert kinds["Qwen3-32B"] == ["full_attention"] * 64
    assert kinds["gpt-oss-120b"][:2] == ["sliding_attention", "full_attention"]


def test_cache_bytes_by_hand():
    qwen3 = MODELS["Qwen3-32B"]["config"]
    assert helpers.cache_bytes(qwen3, 1000) == 1000 * 64 * 2 * 8 * 128 * 2
    gemma = MODELS["Gemma 3 27B"]["config"]
    t = 131072
    assert helpers.cache_bytes(gemma, t) == (10 * t + 52 * 1024) * 2 * 16 * 128 * 2
    nxt = MODELS["Qwen3-Next-80B-A3B"]["config"]
    state = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    assert helpers.cache_bytes(nxt, t) == 12 * t * 2 * 2 * 256 * 2 + 36 * state * 2
    rows = {r["model"]: r for r in helpers.config_table(list(MODELS.values()))}
    assert rows["Qwen3-32B"]["bytes per token at 128k"] == "262,144"
    assert rows["Gemma 3 27B"]["bytes per token at 128k"] == f"{10 * 8192 + 52 * 64:,}"


def test_decode_cost_of_the_hybrid_tends_to_a_quarter():
    nxt = MODELS["Qwen3-Next-80B-A3B"]["config"]
    dense = helpers.all_full(nxt)
    assert helpers.layer_kinds(dense) == ["full_attention"] * 48
    small, large = (helpers.decode_bytes_per_token(nxt, t) / helpers.decode_bytes_per_token(
        dense, t) for t in (256, 2**20))
    assert small > 1 and 0.25 < large < 0.251
    assert helpers.decode_flops_per_token(dense, 100) == 48 * 4 * 16 * 256 * 100


@pytest.mark.slow            # three heads trained, ~11 s
def test_sink_experiment_claims_hold_on_another_seed():
    T = helpers.THRESHOLDS
    r = {k: helpers.mass_report(helpers.train_quiet_head(k, seed=1))
         for k in ("plain", "sink")}
    assert r["plain"]["bos_quiet"] > T["bos_without_sink"]
    assert r["sink"]["sink_quiet"] > T["sink_share"] and r["sink"]["bos_quiet"] < T["bos_with_sink"]
    gated = helpers.train_quiet_head("gate", seed=1)
    gate = helpers.gate_openness(gated)
    assert gate["flagged"] - gate["quiet"] > T["gate_gap"]
    assert helpers.mass_report(gated)["bos_quiet"] > T["bos_with_gate"]
    with pytest.raises(ValueError, match="gate=True"):
        helpers.gate_openness(helpers.train_quiet_head("plain", task=helpers.QuietTask(steps=1)))


def test_explorer_frames_and_their_text():
    ex = explorer.sink_explorer()
    weights, share = explorer.sink_weights(0.0, "all alike")
    assert abs(share - 1 / 7) < 1e-12 and abs(weights.sum() + share - 1) < 1e-12
    text = explorer.describe({"sink": 4.0, "scores": "all low"})
    assert text.startswith("Sink logit b = 4, scores where all low: the sink takes 1.00")
    fig = ex.render(sink=-4.0)
    plt.close(fig)
    assert len(ex.player_frames()) == 15


def test_figures_draw():
    fig, axes = plt.subplots(1, 3)
    rep = {"bos_quiet": 0.9, "sink_quiet": 0.0}
    plots.plot_sink_mass(axes[0], {"plain": rep, "sink": {"bos_quiet": 0.1, "sink_quiet": 0.8}})
    plots.plot_patterns(axes[1], {"a": "LLG", "b": "DDDG"})
    plots.plot_growth(axes[2], [1, 2, 4], {"x": [1.0, 2.0, 4.0]}, ylabel="MiB")
    assert len(axes[1].patches) == 7 and axes[2].get_xscale() == "log"
    plt.close(fig)
