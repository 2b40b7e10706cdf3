"""course_lib.multihead.MultiHeadAttention against torch.nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib import IMPLEMENTATIONS, masks
from course_lib.attention import MultiHeadAttention

D, H = 24, 4


def _torch_mha(bias=True, dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    return nn.MultiheadAttention(D, H, bias=bias, batch_first=True).to(device, dtype).eval()


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("masking", ["none", "causal", "is_causal", "padding", "float"])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch(name, masking, bias):
    theirs = _torch_mha(bias)
    ours = MultiHeadAttention.from_torch(theirs, implementation=name)
    x = torch.randn(2, 7, D, dtype=torch.float64)
    tokens = torch.tensor([[4, 5, 6, 7, 0, 0, 0], [1, 2, 3, 4, 5, 6, 0]])
    kw, tkw = {}, {}
    if masking in ("causal", "is_causal"):
        tkw = {"attn_mask": ~masks.causal_mask(7), "is_causal": masking == "is_causal"}
        kw = {"is_causal": True} if masking == "is_causal" else {"attn_mask": masks.causal_mask(7)}
    elif masking == "padding":
        kw = {"attn_mask": masks.padding_mask(tokens)}
        tkw = {"key_padding_mask": tokens == 0}
    elif masking == "float":
        additive = torch.randn(7, 7, dtype=torch.float64)
        kw, tkw = {"attn_mask": additive}, {"attn_mask": additive}
    expected, expected_w = theirs(x, x, x, need_weights=True, average_attn_weights=False, **tkw)
    out, weights = ours(x, need_weights=True, **kw)
    assert weights.shape == (2, H, 7, 7)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(weights, expected_w, atol=1e-12)
    assert torch.allclose(ours(x, **kw), expected, atol=1e-12)      # need_weights=False: a tensor


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_cross_attention_matches_torch(name):
    theirs = _torch_mha()
    ours = MultiHeadAttention.from_torch(theirs, implementation=name)
    x, mem, val = (torch.randn(3, n, D, dtype=torch.float64) for n in (5, 9, 9))
    expected, _ = theirs(x, mem, val)
    assert torch.allclose(ours(x, mem, val), expected, atol=1e-12)
    expected_kv, _ = theirs(x, mem, mem)
    assert torch.allclose(ours(x, mem), expected_kv, atol=1e-12)    # value defaults to key


def test_training_dropout_only_in_train_mode():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5, implementation="reference")
    x = torch.randn(2, 6, D)
    mha.eval()
    assert torch.equal(mha(x), mha(x))
    mha.train()
    assert not torch.equal(mha(x), mha(x))


def test_gradients_reach_every_parameter():
    mha = MultiHeadAttention(D, H, implementation="flash")
    mha(torch.randn(2, 5, D)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mha.parameters())


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="implementation"):
        MultiHeadAttention(8, 2, implementation="fast")
    with pytest.raises(ValueError, match=r"\(B, L, 8\)"):
        MultiHeadAttention(8, 2)(torch.randn(5, 8))
    with pytest.raises(ValueError, match="batch_first"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2))
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, batch_first=True))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mha_on_cuda(name, dtype):
    theirs = _torch_mha(dtype=dtype, device="cuda")
    ours = MultiHeadAttention.from_torch(theirs, implementation=name)
    x = torch.randn(2, 33, D, device="cuda", dtype=dtype)
    expected, _ = theirs(x, x, x, attn_mask=~masks.causal_mask(33, device="cuda"))
    out = ours(x, is_causal=True)
    assert out.device.type == "cuda" and out.dtype == dtype
    err = (out.float() - expected.float()).norm() / expected.float().norm()
    assert err < (3e-2 if dtype == torch.bfloat16 else 5e-3)
