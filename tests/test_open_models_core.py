"""The core pieces of today's open models' attention, against their one-line math (the
comparisons with transformers are in tests/test_open_models_transformers.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import GatedDeltaNet, OpenAttention
from course_lib.attention.delta_rule import (
    delta_state_bytes,
    gated_delta_rule_chunked,
    gated_delta_rule_recurrent,
    gated_delta_step,
)
from course_lib.attention.layer_pattern import interleaved, layer_mask, pattern_string, rope_layers
from course_lib.attention.masks import causal_mask, sliding_window_mask
from course_lib.attention.output_gate import gate_output
from course_lib.attention.qk_norm import HeadRMSNorm, head_rms_norm
from course_lib.attention.sink_softmax import sink_attention, sink_share, sink_softmax
from course_lib.attention.sparse_topk import indexer_scores, sparse_topk_attention, topk_mask

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------- gated delta rule


def _delta_inputs(B=2, H=3, L=37, E=8, Ev=5, seed=0):
    g = _gen(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=F64)
    k = F.normalize(torch.randn(B, H, L, E, generator=g, dtype=F64), dim=-1)
    v = torch.randn(B, H, L, Ev, generator=g, dtype=F64)
    decay = -2 * torch.rand(B, H, L, generator=g, dtype=F64)
    beta = torch.rand(B, H, L, generator=g, dtype=F64)
    s0 = torch.randn(B, H, E, Ev, generator=g, dtype=F64)
    return q, k, v, decay, beta, s0


@pytest.mark.parametrize("chunk_size", [1, 5, 16, 64])
def test_recurrent_and_chunked_delta_rule_agree_to_1e12(chunk_size):
    q, k, v, g, beta, s0 = _delta_inputs()               # L = 37: a ragged last chunk
    o1, s1 = gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=s0)
    o2, s2 = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=chunk_size, initial_state=s0)
    assert (o1 - o2).abs().max() < 1e-12 and (s1 - s2).abs().max() < 1e-12
    assert o1.abs().max() > 0.1                            # not a trivially zero output


def test_delta_step_is_decay_erase_write_as_matrices():
    q, k, v, g, beta, s0 = _delta_inputs(B=1, H=1, L=1)
    o, s = gated_delta_step(s0, q[:, :, 0], k[:, :, 0], v[:, :, 0], g[:, :, 0], beta[:, :, 0],
                            scale=0.5)
    kk, vv, a, b = k[0, 0, 0][:, None], v[0, 0, 0][:, None], g[0, 0, 0].exp(), beta[0, 0, 0]
    expected = a * (torch.eye(8, dtype=F64) - b * kk @ kk.T) @ s0[0, 0] + b * kk @ vv.T
    torch.testing.assert_close(s[0, 0], expected, atol=1e-14, rtol=0)
    torch.testing.assert_close(o[0, 0], 0.5 * expected.T @ q[0, 0, 0], atol=1e-14, rtol=0)
    wrong = (torch.eye(8, dtype=F64) - b * kk @ kk.T) @ (a * s0[0, 0]) + a * b * kk @ vv.T
    assert (wrong - expected).abs().max() > 1e-3            # decaying after the write differs


def test_delta_rule_state_does_not_grow_and_the_output_is_causal():
    q, k, v, g, beta, _ = _delta_inputs(L=20)
    o, s = gated_delta_rule_recurrent(q, k, v, g, beta)
    assert s.shape == (2, 3, 8, 5)
    v2 = v.clone()
    v2[:, :, 10:] += 1.0                                   # change the future only
    o2, _ = gated_delta_rule_chunked(q, k, v2, g, beta, chunk_size=4)
    assert (o[:, :, :10] - o2[:, :, :10]).abs().max() < 1e-12
    assert (o[:, :, 10:] - o2[:, :, 10:]).abs().max() > 1e-2
    assert delta_state_bytes(2, 4, 8, 5) == 2 * 4 * 8 * 5 * 2


def test_delta_rule_names_the_argument_and_shapes():
    q, k, v, g, beta, _ = _delta_inputs()
    with pytest.raises(ValueError, match=r"beta must have shape \(B, H, L\) = \(2, 3, 37\)"):
        gated_delta_rule_chunked(q, k, v, g, beta[..., :-1])
    with pytest.raises(ValueError, match="chunk_size"):
        gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(ValueError, match=r"initial_state must have shape \(B, H, E, Ev\)"):
        gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=torch.zeros(2, 3, 5, 8))


def test_gated_deltanet_layer_modes_agree():
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 4, 3, chunk_size=4).double()
    x = torch.randn(2, 9, 16, generator=_gen(1), dtype=F64)
    a, b = layer(x, "chunked"), layer(x, "recurrent")
    assert (a - b).abs().max() < 1e-12
    assert layer.state_numbers() == 4 * 4 * 3 + (2 * 2 * 4 + 4 * 3) * 3


# ----------------------------------------------------------------------------- learned sinks


def test_sink_softmax_is_softmax_with_a_dropped_sink_column():
    s = torch.randn(2, 3, 4, 6, generator=_gen(), dtype=F64)
    b = torch.tensor([-1.0, 0.5, 3.0], dtype=F64)
    with_sink = torch.cat([s, b.view(1, 3, 1, 1).expand(2, 3, 4, 1)], dim=-1)
    expected = torch.softmax(with_sink, dim=-1)[..., :-1]
    torch.testing.assert_close(sink_softmax(s, b), expected, atol=1e-15, rtol=0)
    lse = torch.logsumexp(s, dim=-1)
    torch.testing.assert_close(sink_share(s, b), torch.sigmoid(b.view(1, 3, 1) - lse))
    assert (sink_softmax(s, b) - torch.softmax(s, -1)).abs().max() > 1e-2


def test_sink_softmax_extremes():
    s = torch.tensor([[[[1000.0, 999.0, float("-inf")]]]], dtype=F64)
    p = sink_softmax(s, torch.tensor([-1e4], dtype=F64))       # no sink: the plain softmax
    torch.testing.assert_close(p, torch.softmax(s, -1))
    dead = sink_softmax(torch.full((1, 1, 1, 3), float("-inf"), dtype=F64),
                        torch.zeros(1, dtype=F64))
    assert torch.equal(dead, torch.zeros(1, 1, 1, 3, dtype=F64))   # all mass on the sink
    with pytest.raises(ValueError, match=r"sinks must have shape \(H,\) = \(1,\)"):
        sink_softmax(s, torch.zeros(2, dtype=F64))


def test_sink_attention_is_sdpa_times_the_kept_mass_and_handles_gqa():
    g = _gen(3)
    q = torch.randn(2, 4, 5, 8, generator=g, dtype=F64)
    k, v = (torch.randn(2, 2, 5, 8, generator=g, dtype=F64) for _ in range(2))
    b = torch.randn(4, generator=g, dtype=F64)
    out = sink_attention(q, k, v, b, is_causal=True, enable_gqa=True)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    scores = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) / 8 ** 0.5
    scores = scores.masked_fill(~causal_mask(5, 5), float("-inf"))
    kept = torch.sigmoid(torch.logsumexp(scores, -1) - b.view(1, 4, 1))[..., None]
    torch.testing.assert_close(out, plain * kept, atol=1e-14, rtol=0)
    assert torch.autograd.gradcheck(
        lambda b: sink_attention(q[:1, :, :3], k[:1, :, :3], v[:1, :, :3], b, enable_gqa=True),
        (b.clone().requires_grad_(),))


# ------------------------------------------------------------------ QK-norm, gate, patterns


def test_head_rms_norm_is_torch_rms_norm_over_the_head():
    x = torch.randn(2, 5, 4, 8, generator=_gen(), dtype=F64)
    w = torch.randn(8, generator=_gen(1), dtype=F64)
    ref = torch.nn.RMSNorm(8, eps=1e-6, dtype=F64)
    ref.weight.data.copy_(w)
    torch.testing.assert_close(head_rms_norm(x, w), ref(x))
    torch.testing.assert_close(head_rms_norm(x, w - 1, unit_offset=True), ref(x))
    n = HeadRMSNorm(8, unit_offset=True).double()
    torch.testing.assert_close(n(x), torch.nn.RMSNorm(8, eps=1e-6, dtype=F64)(x))
    y = head_rms_norm(100 * x, w, eps=0.0)                 # lengths are normalised away
    torch.testing.assert_close(y, head_rms_norm(x, w, eps=0.0), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"weight must have shape \(E,\) = \(8,\)"):
        head_rms_norm(x, torch.ones(4, dtype=F64))


def test_gate_output():
    a = torch.randn(2, 3, 8, generator=_gen(), dtype=F64)
    z = torch.randn(2, 3, 8, generator=_gen(1), dtype=F64)
    torch.testing.assert_close(gate_output(a, z), a / (1 + torch.exp(-z)))
    with pytest.raises(ValueError, match="gate_logits"):
        gate_output(a, z[..., :4])


def test_layer_patterns():
    assert pattern_string(interleaved(12, 6)) == "LLLLLG" * 2             # Gemma 3
    assert pattern_string(interleaved(4, 2)) == "LGLG"                    # gpt-oss
    assert pattern_string(interleaved(8, 4, local="linear_attention")) == "DDDG" * 2
    assert rope_layers(8, 4) == [True, True, True, False] * 2
    assert rope_layers(3, None) == [True] * 3
    assert torch.equal(layer_mask("sliding_attention", 6, 2), sliding_window_mask(6, window=2))
    assert torch.equal(layer_mask("full_attention", 6), causal_mask(6))
    with pytest.raises(ValueError, match="window"):
        layer_mask("sliding_attention", 6)
    with pytest.raises(ValueError, match="every"):
        interleaved(4, 0)


# --------------------------------------------------------------------------- sparse top-k


def test_indexer_scores_and_topk():
    g = _gen(5)
    iq = torch.randn(2, 6, 3, 4, generator=g, dtype=F64)
    ik = torch.randn(2, 6, 4, generator=g, dtype=F64)
    w = torch.randn(2, 6, 3, generator=g, dtype=F64)
    scores = indexer_scores(iq, ik, w)
    t, s = 4, 2
    expected = sum(w[1, t, h] * torch.relu(iq[1, t, h] @ ik[1, s] / 2) for h in range(3))
    torch.testing.assert_close(scores[1, t, s], expected)
    keep = topk_mask(scores, 2, causal_mask(6))
    assert keep.sum(-1).tolist()[0] == [1, 2, 2, 2, 2, 2]
    assert not (keep & ~causal_mask(6)).any()
    with pytest.raises(ValueError, match=r"weights must have shape \(B, L, H_I\)"):
        indexer_scores(iq, ik, w[..., :2])


def test_sparse_attention_with_every_key_is_causal_attention():
    g = _gen(6)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=F64) for _ in range(3))
    scores = torch.randn(2, 6, 6, generator=g, dtype=F64)
    torch.testing.assert_close(sparse_topk_attention(q, k, v, scores, 6),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))
    one = sparse_topk_attention(q, k, v, scores, 1)        # one key each: that key's value
    best = scores.masked_fill(~causal_mask(6), float("-inf")).argmax(-1)
    torch.testing.assert_close(one, v.gather(2, best[:, None, :, None].expand(2, 3, 6, 4)))


# ---------------------------------------------------------------------------- the layer


def test_open_attention_without_extras_is_plain_gqa_attention():
    torch.manual_seed(0)
    layer = OpenAttention(16, 4, 2, rotary_dim=0).double()
    x = torch.randn(2, 5, 16, generator=_gen(), dtype=F64)
    q = layer.q_proj(x).view(2, 5, 4, 4).transpose(1, 2)
    k = layer.k_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    v = layer.v_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(layer(x), layer.o_proj(o.transpose(1, 2).reshape(2, 5, 16)))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, D\) with D=16"):
        layer(x[..., :8])
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        OpenAttention(16, 4, 3)
    with pytest.raises(ValueError, match="qk_norm must be False, True, 'head' or 'projection'"):
        OpenAttention(16, 4, qk_norm="layer")
