"""Each implementation against torch's SDPA on hundreds of random configurations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attention_cases import TOL, random_case, rel_err

from course_lib import IMPLEMENTATIONS, flash, reference

SEEDS = range(300)


def _run(name: str, case, **extra):
    if name == "flash":
        extra.setdefault("block_size", case.block_size)
    return IMPLEMENTATIONS[name](case.query, case.key, case.value, **case.kwargs, **extra)


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_torch_on_random_configuration(seed):
    case = random_case(seed)
    expected = F.scaled_dot_product_attention(case.query, case.key, case.value, **case.kwargs)
    for name in IMPLEMENTATIONS:
        out = _run(name, case)
        assert out.dtype == case.query.dtype and out.shape == expected.shape, case.label
        assert torch.isfinite(out).all(), f"{name}: NaN/inf for {case.label}"
        err = rel_err(out, expected)
        assert err <= TOL[out.dtype], f"{name}: rel err {err:.2e} for {case.label}"


def test_random_configurations_cover_the_features():
    """The 300 draws really include every feature the issue lists."""
    labels = [random_case(s).label for s in SEEDS]
    for feature in ["bool", "float", "causal", "none", "gqa=True", "bfloat16", "float32",
                    "float64"]:
        assert sum(feature in lab for lab in labels) >= 20, feature
    odd = [random_case(s) for s in SEEDS[:50]]
    assert any(c.query.shape[-2] != c.key.shape[-2] for c in odd)


@pytest.mark.parametrize("seed", range(40))
def test_float64_gradients_match_torch(seed):
    case = random_case(seed, dtypes=(torch.float64,))
    inputs = [t.detach().clone().requires_grad_() for t in (case.query, case.key, case.value)]
    grad_out = torch.randn(F.scaled_dot_product_attention(*inputs, **case.kwargs).shape,
                           dtype=torch.float64)

    def grads(fn, **extra):
        out = fn(*inputs, **case.kwargs, **extra)
        return torch.autograd.grad(out, inputs, grad_out, allow_unused=True)

    expected = grads(F.scaled_dot_product_attention)
    for got in (grads(reference.scaled_dot_product_attention),
                grads(flash.scaled_dot_product_attention, block_size=case.block_size)):
        for g, e, name in zip(got, expected, "qkv", strict=True):
            assert torch.isfinite(g).all(), f"d{name} not finite: {case.label}"
            assert rel_err(g, e) <= 1e-9, f"d{name}: {case.label}"


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_fully_masked_rows_give_zeros_not_nan(name):
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 3)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[1] = False
    additive = torch.zeros(5, 7).masked_fill(~mask, float("-inf"))
    for m in (mask, additive):
        out = IMPLEMENTATIONS[name](q, k, v, attn_mask=m)
        assert torch.equal(out[:, 1], torch.zeros(2, 3))
        assert torch.isfinite(out).all()
        assert rel_err(out, F.scaled_dot_product_attention(q, k, v, attn_mask=m)) < 2e-6


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_float16_on_cpu_matches_torch(name):
    case = random_case(7, dtypes=(torch.float16,))
    expected = F.scaled_dot_product_attention(case.query, case.key, case.value, **case.kwargs)
    out = _run(name, case)
    assert out.dtype == torch.float16
    assert rel_err(out, expected) <= TOL[torch.float16]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("seed", range(60))
def test_matches_torch_on_cuda_half_types(seed):
    case = random_case(seed, dtypes=(torch.bfloat16, torch.float16, torch.float32), device="cuda")
    expected = F.scaled_dot_product_attention(case.query, case.key, case.value, **case.kwargs)
    for name in IMPLEMENTATIONS:
        out = _run(name, case)
        assert out.device == expected.device and out.dtype == expected.dtype
        # fp32 on CUDA may use TF32 matmuls in torch's kernels: compare at the bf16 tolerance
        tol = TOL[torch.bfloat16] if case.query.dtype != torch.float16 else 1e-2
        assert rel_err(out, expected) <= tol, f"{name}: {case.label}"


@pytest.mark.parametrize("seed", range(20))
def test_half_precision_gradients_as_accurate_as_torch_math(seed):
    """bf16/fp16 gradients on random configurations (masks, GQA, scale, L ≠ S): each
    implementation's error against the float64 truth is within 2x that of torch's math kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    case = random_case(seed, dtypes=(torch.bfloat16, torch.float16))
    low = [t.detach().clone().requires_grad_() for t in (case.query, case.key, case.value)]
    exact = [t.detach().double().requires_grad_() for t in low]
    kw64 = dict(case.kwargs)
    if "attn_mask" in kw64 and kw64["attn_mask"].dtype != torch.bool:
        kw64["attn_mask"] = kw64["attn_mask"].double()
    out64 = F.scaled_dot_product_attention(*exact, **kw64)
    grad_out = torch.randn(out64.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(seed))
    truth = torch.autograd.grad(out64, exact, grad_out)

    def errors(fn, **extra):
        out = fn(*low, **case.kwargs, **extra)
        grads = torch.autograd.grad(out, low, grad_out.to(out.dtype))
        assert all(g.dtype == case.query.dtype for g in grads)
        return [rel_err(g, t) for g, t in zip(grads, truth, strict=True)]

    with sdpa_kernel(SDPBackend.MATH):
        math_errors = errors(F.scaled_dot_product_attention)
    for name in IMPLEMENTATIONS:
        extra = {"block_size": case.block_size} if name == "flash" else {}
        for err, math_err, what in zip(errors(IMPLEMENTATIONS[name], **extra), math_errors,
                                       "qkv", strict=True):
            assert err <= 2 * math_err + 1e-4, \
                f"{name} d{what}: {err:.2e} vs torch math {math_err:.2e}, {case.label}"
