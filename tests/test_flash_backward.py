"""course_lib.flash's backward pass: recomputation from the log-sum-exp, checked against torch's
math backend on the forward's case matrix, plus what it saves and what it never builds."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from attention_cases import random_case, rel_err
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from course_lib import flash
from course_lib.chapters.ch08_flash.helpers import ShapeRecorder

#: gradient tolerance (relative, against torch's math backend) per dtype
GRAD_TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def _grads(fn, inputs, kwargs, grad_out, **extra):
    out = fn(*inputs, **kwargs, **extra)
    wrt = [*inputs]
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor) and mask.requires_grad:
        wrt.append(mask)
    return out, torch.autograd.grad(out, wrt, grad_out)


def _with_float_mask_grad(kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor) and mask.dtype != torch.bool:
        kwargs["attn_mask"] = mask.detach().clone().requires_grad_()
    return kwargs


@pytest.mark.parametrize("seed", range(150))
def test_gradients_match_torch_math_on_random_configurations(seed):
    """The forward's case matrix (masks bool/float with dead rows, causal, GQA, broadcast batch,
    L ≠ S, scale, odd blocks): dQ, dK, dV and a float mask's gradient equal torch math's."""
    case = random_case(seed, dtypes=(torch.float64, torch.float32))
    inputs = [t.detach().clone().requires_grad_() for t in (case.query, case.key, case.value)]
    kwargs = _with_float_mask_grad(case.kwargs)
    with sdpa_kernel(SDPBackend.MATH):
        out_ref = F.scaled_dot_product_attention(*inputs, **kwargs)
    gen = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(out_ref.shape, generator=gen, dtype=torch.float64).to(out_ref.dtype)
    with sdpa_kernel(SDPBackend.MATH):
        _, expected = _grads(F.scaled_dot_product_attention, inputs, kwargs, grad_out)
    _, got = _grads(flash.scaled_dot_product_attention, inputs, kwargs, grad_out,
                    block_size=case.block_size)
    assert len(got) == len(expected)
    for g, e, name in zip(got, expected, ["dq", "dk", "dv", "dmask"], strict=False):
        assert g.shape == e.shape and g.dtype == e.dtype, f"{name}: {case.label}"
        assert torch.isfinite(g).all(), f"{name} not finite: {case.label}"
        # ‖g − e‖ / max(‖e‖, 1): a mask constant along a row has gradient 0 (round-off only)
        err = (g.double() - e.double()).norm().item() / max(e.double().norm().item(), 1.0)
        assert err <= GRAD_TOL[case.query.dtype], f"{name}: rel err {err:.2e}, {case.label}"


def test_random_configurations_include_float_mask_gradients_and_gqa():
    labels = [random_case(s, dtypes=(torch.float64, torch.float32)).label for s in range(150)]
    assert sum("float gqa" in lab or " float " in lab for lab in labels) >= 20
    assert sum("gqa=True" in lab for lab in labels) >= 15
    assert sum("causal" in lab for lab in labels) >= 20


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("L,S", [(5, 9), (9, 5), (7, 7), (1, 13)])
@pytest.mark.parametrize("bias", ["is_causal", "upper_left", "lower_right", "lower_right_small"])
def test_both_causal_alignments_and_bias_objects(L, S, bias):
    g = torch.Generator().manual_seed(L * 31 + S)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64, requires_grad=True)
               for n in (L, S, S))
    kwargs = {"is_causal": True} if bias == "is_causal" else {
        "attn_mask": {"upper_left": causal_upper_left(L, S),
                      "lower_right": causal_lower_right(L, S),
                      "lower_right_small": causal_lower_right(1, S)}[bias]}
    grad_out = torch.randn(2, 3, L, 4, generator=g, dtype=torch.float64)
    with sdpa_kernel(SDPBackend.MATH):
        expected = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, **kwargs),
                                       (q, k, v), grad_out)
    got = torch.autograd.grad(flash.scaled_dot_product_attention(q, k, v, **kwargs, block_size=2),
                              (q, k, v), grad_out)
    for a, b in zip(got, expected, strict=True):
        assert torch.isfinite(a).all() and rel_err(a, b) < 1e-10


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_gradients_in_input_dtype_and_as_accurate_as_torch_math(dtype):
    g = torch.Generator().manual_seed(3)
    exact = [torch.randn(2, 4, 40, 16, generator=g, dtype=torch.float64, requires_grad=True)
             for _ in range(3)]
    low = [t.detach().to(dtype).requires_grad_() for t in exact]
    grad_out = torch.randn(2, 4, 40, 16, generator=g, dtype=torch.float64)
    truth = torch.autograd.grad(F.scaled_dot_product_attention(*exact, is_causal=True), exact,
                                grad_out)
    with sdpa_kernel(SDPBackend.MATH):
        math = torch.autograd.grad(F.scaled_dot_product_attention(*low, is_causal=True), low,
                                   grad_out.to(dtype))
    got = torch.autograd.grad(flash.scaled_dot_product_attention(*low, is_causal=True,
                                                                 block_size=(8, 16)),
                              low, grad_out.to(dtype))
    for a, m, t in zip(got, math, truth, strict=True):
        assert a.dtype == dtype
        assert rel_err(a, t) <= 2 * rel_err(m, t) + 1e-4


@pytest.mark.parametrize("shapes", [((2, 0, 4), (2, 5, 4), (2, 5, 3)),     # L = 0
                                    ((2, 6, 4), (2, 0, 4), (2, 0, 3)),     # S = 0
                                    ((2, 6, 0), (2, 5, 0), (2, 5, 3)),     # E = 0
                                    ((0, 6, 4), (0, 5, 4), (0, 5, 3)),     # batch 0
                                    ((2, 6, 4), (2, 5, 4), (2, 5, 0))])    # Ev = 0
def test_empty_dimensions_give_torchs_gradients(shapes):
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
              for s in shapes]
    out = F.scaled_dot_product_attention(*inputs)
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    expected = torch.autograd.grad(out, inputs, grad_out, allow_unused=True)
    got = torch.autograd.grad(flash.scaled_dot_product_attention(*inputs), inputs, grad_out)
    for a, b, t in zip(got, expected, inputs, strict=True):
        b = torch.zeros_like(t) if b is None else b
        assert a.shape == t.shape and torch.allclose(a, b, atol=1e-12)


def test_dropout_masks_are_regenerated_in_the_backward():
    """Same seed: the recomputing backward equals autograd through the same tiled forward
    (whose per-tile dropout masks are the same), and the kept share is about 1 - p."""
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64, requires_grad=True)
              for n in (37, 53, 53)]
    grad_out = torch.randn(2, 2, 37, 8, generator=g, dtype=torch.float64)
    results = []
    for fn in (flash.scaled_dot_product_attention, flash.tile_autograd_attention):
        torch.manual_seed(11)
        out = fn(*inputs, dropout_p=0.3, block_size=(8, 16))
        results.append((out, torch.autograd.grad(out, inputs, grad_out)))
    (out_a, grads_a), (out_b, grads_b) = results
    assert torch.allclose(out_a, out_b, atol=1e-12)
    for a, b in zip(grads_a, grads_b, strict=True):
        assert rel_err(a, b) < 1e-12
    torch.manual_seed(12)                                   # another seed: other masks
    other = flash.scaled_dot_product_attention(*inputs, dropout_p=0.3, block_size=(8, 16))
    assert not torch.allclose(other, out_a)
    eye = torch.eye(400, dtype=torch.float64)               # V = I: the dropped weights
    weights = flash.scaled_dot_product_attention(torch.zeros(1, 300, 4, dtype=torch.float64),
                                                 torch.zeros(1, 400, 4, dtype=torch.float64),
                                                 eye, dropout_p=0.3, block_size=64)
    kept = (weights != 0).double().mean().item()
    assert abs(kept - 0.7) < 0.01
    assert torch.allclose(weights[weights != 0], torch.tensor(1 / 400 / 0.7, dtype=torch.float64))


def test_dropout_one_drops_everything_with_zero_gradients():
    q = torch.randn(1, 5, 4, requires_grad=True)
    out = flash.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert torch.equal(out, torch.zeros_like(out))
    (g,) = torch.autograd.grad(out.sum(), q)
    assert torch.isfinite(g).all()


def _saved_numels(fn, *args, **kwargs) -> list[int]:
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return saved


def test_forward_saves_only_q_k_v_o_and_lse():
    H, L, E = 2, 512, 16
    q, k, v = (torch.randn(1, H, L, E, requires_grad=True) for _ in range(3))
    saved = _saved_numels(flash.scaled_dot_product_attention, q, k, v, block_size=64)
    assert sorted(saved) == sorted([H * L * E] * 4 + [H * L])      # Q, K, V, O and the lse
    contrast = _saved_numels(flash.tile_autograd_attention, q, k, v, block_size=64)
    assert sum(contrast) > H * L * L                            # autograd keeps every P tile


def test_backward_never_creates_an_L_by_S_tensor():
    L = S = 1024
    q, k, v = (torch.randn(1, 2, L, 16, requires_grad=True) for _ in range(3))
    mask = (torch.randn(L, S) > -1).float().log().requires_grad_(False)      # float, -inf holes
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": torch.arange(S) < 1000}):
        out = flash.scaled_dot_product_attention(q, k, v, block_size=(128, 256), **kwargs)
        with ShapeRecorder() as rec:
            out.backward(torch.ones_like(out))
        assert len(rec.shapes) > 50
        assert all(torch.Size(s).numel() < L * S for _, s in rec.shapes), kwargs
    assert mask.shape == (L, S)


def test_float_mask_gradient_keeps_the_masks_broadcast_shape():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 4, n, 5, generator=g, dtype=torch.float64) for n in (6, 9, 9))
    for shape in [(9,), (6, 9), (4, 1, 9), (3, 1, 6, 9), (1, 4, 6, 9)]:  # vary along S
        mask = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
        (got,) = torch.autograd.grad(
            flash.scaled_dot_product_attention(q, k, v, attn_mask=mask, block_size=4).sum(),
            mask)
        with sdpa_kernel(SDPBackend.MATH):
            (expected,) = torch.autograd.grad(
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum(), mask)
        assert got.shape == mask.shape and rel_err(got, expected) < 1e-10


def test_tile_autograd_path_is_kept_for_contrast_and_agrees():
    q, k, v = (torch.randn(1, 2, 33, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = torch.autograd.grad(flash.scaled_dot_product_attention(q, k, v, block_size=8).sum(),
                                (q, k, v))
    b = torch.autograd.grad(flash.tile_autograd_attention(q, k, v, block_size=8).sum(), (q, k, v))
    for x, y in zip(a, b, strict=True):
        assert rel_err(x, y) < 1e-12


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"dropout_p": 0.3},
                                    {"attn_mask": "float"}])
def test_in_place_and_differentiable_tile_updates_agree(kwargs):
    """A plain backward (no graph recorded, no torch.func wrapper) updates its tiles in place;
    with ``create_graph=True`` (double backward) every step is out of place. Same gradients;
    and the in-place path allocates fewer tile-sized tensors (no tile for dP − D nor P ∘ ...)."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 20, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    kwargs = dict(kwargs)
    leaves = [q, k, v]
    if kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = torch.randn(20, 20, generator=g, dtype=torch.float64,
                                          requires_grad=True)
        leaves.append(kwargs["attn_mask"])
    grad_out = torch.randn(2, 3, 20, 8, generator=g, dtype=torch.float64)
    results, tiles = [], []
    for create_graph in (False, True):
        torch.manual_seed(3)
        out = flash.scaled_dot_product_attention(q, k, v, block_size=(8, 8), **kwargs)
        with ShapeRecorder() as rec:
            results.append(torch.autograd.grad(out, leaves, grad_out, create_graph=create_graph))
        tiles.append(sum(tuple(s[-2:]) == (8, 8) and not op.endswith("_")   # new (N, 8, 8)
                         for op, s in rec.shapes))
    for a, b in zip(*results, strict=True):
        assert rel_err(a, b) < 1e-14
    assert 0 < tiles[0] < tiles[1], tiles
