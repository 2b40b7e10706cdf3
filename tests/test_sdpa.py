"""course_lib.sdpa: backend pinning and the which-backend report, on CPU and CUDA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib import sdpa

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _qkv(*shape, dtype=torch.float32, device="cpu"):
    return (torch.randn(*shape, dtype=dtype, device=device) for _ in range(3))


@pytest.mark.parametrize("backend", [None, "math", "flash"])
def test_cpu_backends_agree_with_torch(backend):
    q, k, v = _qkv(2, 3, 17, 8)
    out = sdpa.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_cuda_only_backend_on_cpu_is_a_clear_error(backend):
    q, k, v = _qkv(1, 2, 5, 4)
    with pytest.raises(sdpa.BackendUnavailableError,
                       match=rf"'{backend}' cannot run query \(1, 2, 5, 4\).*cpu"):
        sdpa.scaled_dot_product_attention(q, k, v, backend=backend)


def test_pinned_backend_error_carries_torchs_reason():
    q, k, v = _qkv(2, 5, 4)                            # 3-d: the fused CPU kernel wants 4-d
    with pytest.raises(RuntimeError, match="4 dimensional"):
        sdpa.scaled_dot_product_attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="backend must be None or one of"):
        sdpa.scaled_dot_product_attention(q, k, v, backend="fastest")


def test_wrapper_validates_like_the_others():
    q, k, v = _qkv(1, 2, 5, 4)
    with pytest.raises(ValueError, match="dropout_p"):      # torch: dropout probability > 1
        sdpa.scaled_dot_product_attention(q, k, v, dropout_p=1.5)


@pytest.mark.parametrize("case,expected", [
    ("4d fp32", "flash"),            # torch's fused CPU flash kernel
    ("3d fp32", "math"),             # fused kernels need 4-d inputs
    ("dropout", "math"),             # the CPU fused kernel has no dropout
])
def test_backend_report_on_cpu(case, expected):
    shape = (2, 5, 8) if case == "3d fp32" else (1, 2, 5, 8)
    q, k, v = _qkv(*shape)
    report = sdpa.backend_report(q, k, v, dropout_p=0.1 if case == "dropout" else 0.0)
    assert report.chosen == expected and report.device == "cpu"
    assert report.eligible[expected] and report.eligible["math"]
    assert not report.eligible["efficient"] and "CUDA only" in report.reasons["efficient"]
    if expected == "math":
        assert not report.eligible["flash"] and report.reasons["flash"]
    assert f"torch runs the '{expected}' SDPA backend on cpu" in str(report)


def test_backend_report_follows_torchs_global_switches():
    q, k, v = _qkv(1, 2, 5, 8)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        assert sdpa.backend_report(q, k, v).chosen == "math"


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_reaches_a_fused_kernel_for_half_types(dtype):
    q, k, v = _qkv(2, 4, 128, 64, dtype=dtype, device="cuda")
    report = sdpa.backend_report(q, k, v, is_causal=True)
    assert report.device.startswith("cuda")
    assert report.chosen in ("flash", "efficient", "cudnn"), str(report)
    assert report.eligible["flash"] and report.eligible["efficient"], str(report)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for backend in (None, "math", "flash", "efficient"):
        out = sdpa.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
        assert out.dtype == dtype
        assert (out.float() - expected.float()).norm() / expected.float().norm() < 1e-2


@pytest.mark.cuda
@CUDA
def test_cuda_float64_has_only_math():
    q, k, v = _qkv(1, 2, 16, 8, dtype=torch.float64, device="cuda")
    report = sdpa.backend_report(q, k, v)
    assert report.chosen == "math" and not report.eligible["flash"]
    with pytest.raises(sdpa.BackendUnavailableError, match="'flash' cannot run"):
        sdpa.scaled_dot_product_attention(q, k, v, backend="flash")
