"""Dropout equal to torch's math kernel under the same generator state, for all three
implementations; flash without an (L, S) tensor.

torch's math kernel calls ``at::dropout`` on the ``(..., L, S)`` weights: on the CPU that is
``bernoulli_(1 - p)``, one generator number per weight in row-major order. The first test pins
that premise (a draw block by block is the one big draw), which is what lets flash draw one
query-row block at a time (and replay it in the backward) yet give torch's mask.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from attention_cases import rel_err
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from course_lib import IMPLEMENTATIONS, flash
from course_lib.chapters.ch08_flash.helpers import ShapeRecorder

NAMES = list(IMPLEMENTATIONS)


def torch_math(*args, **kwargs):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def randn(*shape, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bernoulli_draw_block_by_block_is_the_one_big_draw(threads):
    """The premise: torch's CPU bernoulli_ takes one generator number per element, in order, for
    any dtype and thread count; so rows drawn a block at a time are the rows of one draw."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = torch.empty(3, 37, 1500, dtype=torch.float32).bernoulli_(
            0.7, generator=torch.Generator().manual_seed(1))
        gen = torch.Generator().manual_seed(1)
        parts = [torch.empty(n, 1500, dtype=torch.bool).bernoulli_(0.7, generator=gen)
                 for n in (1, 30, 37, 40, 3)]
    finally:
        torch.set_num_threads(old)
    assert torch.equal(whole.bool(), torch.cat(parts).view(3, 37, 1500))
    assert abs(whole.mean().item() - 0.7) < 0.01


#: 3-d and 4-d inputs; every kind of mask (4-d: GQA and a broadcast batch too)
SHAPES = {
    "3d": ((2, 9, 8), (2, 13, 8), (2, 13, 5), {}),
    "4d": ((2, 4, 9, 8), (2, 2, 13, 8), (2, 2, 13, 5), {"enable_gqa": True}),
}
MASKS = {
    "none": lambda L, S: {},
    "causal": lambda L, S: {"is_causal": True},
    "bool": lambda L, S: {"attn_mask": torch.rand(L, S, generator=torch.Generator()
                                                  .manual_seed(2)) < 0.6},
    "float": lambda L, S: {"attn_mask": randn(1, L, S, seed=3).requires_grad_()},
    "lower_right": lambda L, S: {"attn_mask": causal_lower_right(L, S)},
}


def _run(fn, shapes, kw, p, seed, grad_seed=5):
    """(out, grads, the generator's next numbers) after ``fn`` from ``torch.manual_seed(seed)``."""
    (qs, ks, vs, extra) = shapes
    inputs = [randn(*s, seed=i).requires_grad_() for i, s in enumerate((qs, ks, vs))]
    wrt = list(inputs)
    mask = kw.get("attn_mask")
    if isinstance(mask, torch.Tensor) and mask.requires_grad:
        mask = mask.detach().clone().requires_grad_()
        kw = dict(kw, attn_mask=mask)
        wrt.append(mask)
    torch.manual_seed(seed)
    out = fn(*inputs, dropout_p=p, **extra, **kw)
    after = torch.rand(4)
    grad_out = randn(*out.shape, seed=grad_seed)
    return out, torch.autograd.grad(out, wrt, grad_out), after


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@pytest.mark.parametrize("p", [0.2, 0.5])
@pytest.mark.parametrize("kind", list(MASKS))
@pytest.mark.parametrize("dims", list(SHAPES))
@pytest.mark.parametrize("name", NAMES)
def test_dropout_equals_torch_math_under_the_same_seed(name, dims, kind, p):
    """Output, gradients (torch's backward uses the mask it drew) and the generator's state
    afterwards: the same as torch's math kernel. flash with tiles that cut rows and columns."""
    shapes = SHAPES[dims]
    L, S = shapes[0][-2], shapes[1][-2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = MASKS[kind](L, S)
    fn = IMPLEMENTATIONS[name]
    if name == "flash":
        def fn(*a, **k):
            return flash.scaled_dot_product_attention(*a, block_size=(4, 5), **k)
    out, grads, after = _run(fn, shapes, kw, p, seed=11)
    e_out, e_grads, e_after = _run(torch_math, shapes, kw, p, seed=11)
    assert rel_err(out, e_out) < 1e-13, f"{name} {dims} {kind} {p}"
    assert torch.equal(after, e_after)                     # the generator moved as torch's
    for g, e in zip(grads, e_grads, strict=True):
        assert g.shape == e.shape and rel_err(g, e) < 1e-12
    other, _, _ = _run(fn, shapes, kw, p, seed=12)         # another seed, another mask
    assert rel_err(other, out) > 1e-3


def test_dropout_p_edges_draw_nothing_like_torch():
    """torch draws no number for p = 0, p < 0 (no dropout) or p = 1 (zeros), nor for L = 0."""
    q = randn(2, 5, 4)
    for p, shape in ((0.0, (2, 5, 4)), (-0.5, (2, 5, 4)), (1.0, (2, 5, 4)), (0.3, (2, 0, 4))):
        x = randn(*shape)
        for name in NAMES:
            torch.manual_seed(0)
            out = IMPLEMENTATIONS[name](x, q, q, dropout_p=p)
            after = torch.rand(2)
            torch.manual_seed(0)
            expected = torch_math(x, q, q, dropout_p=p)
            assert torch.equal(after, torch.rand(2)), (name, p)
            assert rel_err(out, expected) < 1e-13, (name, p)


def test_flash_dropout_holds_no_L_by_S_tensor_and_replays_its_mask():
    """The mask is drawn (B_q, S) rows per head and replayed in the backward: no (L, S) tensor
    in the forward or the backward, and gradients equal autograd through the same forward."""
    L = S = 1024
    q, k, v = (randn(1, 2, L, 16, seed=i).float().requires_grad_() for i in range(3))
    torch.manual_seed(3)
    with ShapeRecorder() as rec:
        out = flash.scaled_dot_product_attention(q, k, v, dropout_p=0.3, block_size=(128, 256))
        out.backward(torch.ones_like(out))
    assert len(rec.shapes) > 50
    assert all(torch.Size(s).numel() < L * S for _, s in rec.shapes)
    grads = [t.grad.clone() for t in (q, k, v)]
    torch.manual_seed(3)
    contrast = flash.tile_autograd_attention(q, k, v, dropout_p=0.3, block_size=(128, 256))
    assert torch.equal(contrast, out)
    for g, e in zip(grads, torch.autograd.grad(contrast.sum(), (q, k, v)), strict=True):
        assert rel_err(g, e) < 1e-5


def test_keep_rate_and_scaling():
    """V = I shows the dropped weights: about 1 - p kept, each scaled by 1 / (1 - p)."""
    eye = torch.eye(400, dtype=torch.float64)
    torch.manual_seed(0)
    w = flash.scaled_dot_product_attention(torch.zeros(1, 300, 4, dtype=torch.float64),
                                           torch.zeros(1, 400, 4, dtype=torch.float64), eye,
                                           dropout_p=0.3, block_size=64)
    assert abs((w != 0).double().mean().item() - 0.7) < 0.01
    assert torch.allclose(w[w != 0], torch.tensor(1 / 400 / 0.7, dtype=torch.float64))
