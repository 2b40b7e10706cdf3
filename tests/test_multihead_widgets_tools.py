"""Chapter 4 helpers: split/merge, parameter counts, residual/norm demos."""

import pytest
import torch
from torch import nn

from course_lib.attention import MultiHeadAttention, TransformerBlock
from course_lib.chapters.ch04_multi_head import helpers as mt


def test_split_merge_round_trip_and_layout():
    x = torch.randn(2, 5, 12)
    h = mt.split_heads(x, 3)
    assert h.shape == (2, 3, 5, 4)
    torch.testing.assert_close(h[:, 1, :, :], x[..., 4:8])
    torch.testing.assert_close(mt.merge_heads(h), x)


def test_split_without_permute_is_wrong_but_same_shape():
    x = torch.randn(1, 5, 12)
    bad = mt.split_heads_without_permute(x, 3)
    assert bad.shape == mt.split_heads(x, 3).shape
    assert not torch.equal(bad, mt.split_heads(x, 3))


def test_split_rejects_indivisible():
    with pytest.raises(ValueError):
        mt.split_heads(torch.zeros(1, 2, 10), 3)


@pytest.mark.parametrize("bias", [True, False])
def test_parameter_formula_vit_base(bias):
    E, H = 768, 12
    ours = mt.count_parameters(MultiHeadAttention(E, H, bias=bias))
    theirs = mt.count_parameters(nn.MultiheadAttention(E, H, bias=bias, batch_first=True))
    assert ours == theirs == mt.mha_parameter_formula(E, bias)
    assert mt.mha_parameter_formula(E, True) == 2_362_368


def test_heads_do_not_change_parameter_count():
    counts = {mt.count_parameters(MultiHeadAttention(64, h)) for h in (1, 2, 4, 8)}
    assert counts == {mt.mha_parameter_formula(64)}


def test_transformer_block_norm_placement():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16) * 3 + 1
    post = TransformerBlock(16, 2, norm_first=False)
    y = post(x)  # post-norm ends with LayerNorm: each token has mean 0, variance 1
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    pre = TransformerBlock(16, 2, norm_first=True)
    h = x + pre.attn(pre.ln1(x))                      # x + MHA(LN(x)), then x + MLP(LN(x))
    torch.testing.assert_close(pre(x), h + pre.mlp(pre.ln2(h)))
    assert not torch.allclose(pre(x).mean(-1), torch.zeros(2, 5), atol=1e-2)


def test_transformer_block_without_mlp_and_norm_returns_weights():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    block = TransformerBlock(16, 2, mlp=False, layer_norm=False)
    out, w = block(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, x + block.attn(x, is_causal=True))
    assert w.shape == (2, 2, 5, 5) and block.mlp is None and block.ln2 is None
    assert torch.all(w.triu(1) == 0)


def test_depth_profile_attention_only_collapses_residual_does_not():
    only = mt.depth_profile("attention only", depth=6)
    res = mt.depth_profile("attention + residual", depth=6)
    assert len(only["spread"]) == 7 and len(only["grad"]) == 6
    assert only["spread"][-1] < 1e-3 < 0.5 < res["spread"][-1]
    post = mt.depth_profile("post-norm", depth=4)
    assert all(abs(r - 1) < 0.02 for r in post["rms"][1:])
    with pytest.raises(ValueError):
        mt.depth_profile("sideways")


def test_token_spread():
    assert mt.token_spread(torch.ones(1, 4, 3)) == 0.0
    assert mt.token_spread(torch.tensor([[[1.0], [-1.0]]])) == pytest.approx(1.0)


def test_head_scores_softmax_equals_layer_weights():
    layer, x = mt.toy_heads_layer()
    with torch.no_grad():
        _, w = layer(x, need_weights=True)
        s = mt.head_scores(layer, x)
    torch.testing.assert_close(torch.softmax(s, -1), w)
