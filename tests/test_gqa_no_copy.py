"""Grouped-query attention in `reference` and `flash` shares each K/V head among its query heads:
recorded ATen ops show no repeat_interleave and no tensor the size of K repeated per query head,
forward or backward. (torch's math backend does copy: the control.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib import flash, reference

B, HQ, HKV, L, S, E = 1, 8, 2, 16, 512, 32          # G = 4 query heads per key/value head


class OpRecorder(TorchDispatchMode):
    """(op name, elements of each new, non-view output) for every ATen op run."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.ops.append((func.overloadpacket.__name__, t.numel()))
        return out


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, HQ, L, E, generator=g, requires_grad=True)
    k, v = (torch.randn(B, HKV, S, E, generator=g, requires_grad=True) for _ in range(2))
    return q, k, v


def _record(fn):
    q, k, v = _inputs()
    with OpRecorder() as rec:
        out = fn(q, k, v, enable_gqa=True)
        out.backward(torch.ones_like(out))
    return rec.ops


def _copies_of_kv(ops):
    """Ops that repeat K/V per query head: repeat ops, or a new tensor as large as K·G."""
    expanded = B * HQ * S * E
    return [(name, n) for name, n in ops
            if "repeat" in name or n >= expanded]


@pytest.mark.parametrize("fn", [reference.scaled_dot_product_attention,
                                flash.scaled_dot_product_attention], ids=["reference", "flash"])
def test_gqa_does_not_copy_key_and_value(fn):
    ops = _record(fn)
    assert len(ops) > 10                               # the recorder saw the computation
    assert _copies_of_kv(ops) == []


def test_control_torch_math_backend_repeats_key_and_value():
    with sdpa_kernel(SDPBackend.MATH):
        ops = _record(F.scaled_dot_product_attention)
    copies = _copies_of_kv(ops)                        # repeat_interleave runs as expand+clone
    assert ("clone", B * HQ * S * E) in copies


@pytest.mark.parametrize("fn", [reference.scaled_dot_product_attention,
                                flash.scaled_dot_product_attention], ids=["reference", "flash"])
def test_gqa_grouping_matches_torch(fn):
    q, k, v = _inputs()
    mask = torch.randn(HQ, L, S)                       # a per-query-head mask
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": mask}):
        out = fn(q, k, v, enable_gqa=True, **kwargs)
        expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
        want = torch.autograd.grad(expected.square().sum(), (q, k, v))
        assert torch.allclose(out, expected, atol=1e-5)
        for a, b in zip(grads, want, strict=True):
            assert torch.allclose(a, b, atol=1e-4)
