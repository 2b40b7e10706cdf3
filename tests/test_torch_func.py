"""torch.func over the attention core, with torch's SDPA (math kernel) as the control.

``course_lib.flash`` is an ``autograd.Function`` (setup_context form, generated vmap rule, a jvp,
a differentiable backward): ``vmap``, ``grad``, ``jacrev``, ``jvp``, ``hessian`` and double
backward must give torch's numbers. torch's own fused CPU kernel (4-d inputs, no dropout) has
no forward AD and no double backward; its math kernel has both, so that is the control here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attention_cases import rel_err
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_lib import IMPLEMENTATIONS, flash

NAMES = list(IMPLEMENTATIONS)


def torch_math(*args, **kwargs):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def small_flash(*args, **kwargs):
    """flash with tiles smaller than the inputs, so every transform crosses tile borders."""
    return flash.scaled_dot_product_attention(*args, block_size=(2, 3), **kwargs)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


#: the same attention call for each implementation: plain, causal, float mask, GQA with scale
CASES = {
    "plain": ((2, 5, 4), (2, 7, 4), (2, 7, 3), {}),
    "causal": ((2, 6, 4), (2, 6, 4), (2, 6, 3), {"is_causal": True}),
    "float mask": ((2, 5, 4), (2, 7, 4), (2, 7, 3), {"attn_mask": "float"}),
    "gqa": ((4, 5, 4), (2, 7, 4), (2, 7, 3), {"enable_gqa": True, "scale": 0.4}),
}


def case(name):
    qs, ks, vs, kw = CASES[name]
    kw = dict(kw)
    if kw.get("attn_mask") == "float":
        mask = randn(qs[-2], ks[-2], seed=9)
        mask[1, :3] = float("-inf")
        kw["attn_mask"] = mask
    return randn(*qs, seed=1), randn(*ks, seed=2), randn(*vs, seed=3), kw


def loss_of(fn, kw):
    return lambda q, k, v: fn(q, k, v, **kw).sin().sum()


@pytest.mark.parametrize("which", list(CASES))
def test_vmap_of_grad_equals_torchs(which):
    """The issue's acceptance test: torch.func.vmap(torch.func.grad(f)) over a loss using flash
    equals the same with torch's SDPA, for a batch of 3 independent problems."""
    q, k, v, kw = case(which)
    batch = [torch.stack([t + 0.1 * i for i in range(3)]) for t in (q, k, v)]
    expected = vmap(grad(loss_of(F.scaled_dot_product_attention, kw), argnums=(0, 1, 2)))(*batch)
    got = vmap(grad(loss_of(small_flash, kw), argnums=(0, 1, 2)))(*batch)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and rel_err(g, e) < 1e-12
    # and each batch element equals its own unbatched gradient
    one = grad(loss_of(small_flash, kw), argnums=(0, 1, 2))(*(t[1] for t in batch))
    for g, o in zip(got, one, strict=True):
        assert rel_err(g[1], o) < 1e-13


@pytest.mark.parametrize("which", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_vmap_forward_and_jacrev(name, which):
    q, k, v, kw = case(which)
    fn = small_flash if name == "flash" else IMPLEMENTATIONS[name]
    batch = torch.stack([q, 2 * q])
    got = vmap(lambda q: fn(q, k, v, **kw))(batch)
    assert rel_err(got, torch.stack([torch_math(x, k, v, **kw) for x in batch])) < 1e-13
    jac = jacrev(lambda q, v: fn(q, k, v, **kw), argnums=(0, 1))(q, v)
    expected = jacrev(lambda q, v: torch_math(q, k, v, **kw), argnums=(0, 1))(q, v)
    for a, b in zip(jac, expected, strict=True):
        assert a.shape == b.shape and rel_err(a, b) < 1e-12


@pytest.mark.parametrize("which", list(CASES))
def test_jvp_and_jacfwd_equal_torch_math(which):
    """Forward mode: flash's jvp (one tiled pass) against torch's math kernel, tangents for all
    of Q, K, V (and the float mask), then for V alone."""
    q, k, v, kw = case(which)
    tangents = (randn(*q.shape, seed=4), randn(*k.shape, seed=5), randn(*v.shape, seed=6))
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        def on(fn):
            return lambda q, k, v, m: fn(q, k, v, attn_mask=m, **kw)
        primals, tangents = (q, k, v, mask), (*tangents, randn(*mask.shape, seed=7))
    else:
        def on(fn):
            return lambda q, k, v: fn(q, k, v, **kw)
        primals = (q, k, v)
    out, tangent = jvp(on(small_flash), primals, tangents)
    e_out, e_tangent = jvp(on(torch_math), primals, tangents)
    assert rel_err(out, e_out) < 1e-13 and rel_err(tangent, e_tangent) < 1e-12
    kw_all = dict(kw, attn_mask=mask) if mask is not None else kw
    jac = jacfwd(lambda v: small_flash(q, k, v, **kw_all))(v)
    assert rel_err(jac, jacfwd(lambda v: torch_math(q, k, v, **kw_all))(v)) < 1e-12


@pytest.mark.parametrize("which", ["plain", "float mask"])
def test_hessian_equals_torch_math(which):
    q, k, v, kw = case(which)
    q, k, v = q[:1, :3], k[:1, :4], v[:1, :4]
    if "attn_mask" in kw:
        kw["attn_mask"] = kw["attn_mask"][:3, :4]
    h = hessian(loss_of(small_flash, kw), argnums=(0, 1))(q, k, v)
    e = hessian(loss_of(torch_math, kw), argnums=(0, 1))(q, k, v)
    for a_row, e_row in zip(h, e, strict=True):
        for a, b in zip(a_row, e_row, strict=True):
            assert rel_err(a, b) < 1e-11


@pytest.mark.parametrize("which", list(CASES))
def test_double_backward_gradgradcheck(which):
    """The backward pass is written in differentiable ops (no in-place update of a tensor
    autograd saved), including the gradient reaching the log-sum-exp."""
    q, k, v, kw = case(which)
    inputs = [t[:1, :4].clone().requires_grad_() for t in (q, k, v)]
    if "attn_mask" in kw:
        kw["attn_mask"] = kw["attn_mask"][:4, :4]
    if kw.get("enable_gqa"):
        inputs = [t[:, :4].clone().requires_grad_() for t in (q[:2], k[:1], v[:1])]
    assert torch.autograd.gradgradcheck(lambda *a: small_flash(*a, **kw), inputs)


def test_double_backward_equals_torch_math():
    q, k, v, _ = case("plain")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]

    def second(fn):
        (gq,) = torch.autograd.grad(fn(*leaves).pow(2).sum(), leaves[0], create_graph=True)
        return torch.autograd.grad(gq.sin().sum(), leaves)

    for a, b in zip(second(small_flash), second(torch_math), strict=True):
        assert rel_err(a, b) < 1e-12


def test_gradcheck_with_batched_grad():
    """gradcheck's check_batched_grad runs the backward under vmap (the issue's failure:
    "Batching rule not implemented for aten::alias")."""
    q, k, v, kw = case("float mask")
    mask = kw["attn_mask"][:4, :5].clone().requires_grad_()
    inputs = [t[:, :4, :].clone().requires_grad_() for t in (q,)] + \
        [t[:, :5].clone().requires_grad_() for t in (k, v)]
    assert torch.autograd.gradcheck(lambda q, k, v, m: small_flash(q, k, v, attn_mask=m),
                                    (*inputs, mask), check_batched_grad=True,
                                    check_forward_ad=True, check_batched_forward_grad=True)


@pytest.mark.parametrize("which", list(CASES))
def test_batched_gradients_with_one_tile_equal_the_loop(which):
    """Issue 55: with its default tiles flash covers a small input in one tile, so each slice of
    the backward spans a whole dimension, where ``t[:, 0:n]`` returns ``aten::alias``, which
    the vmap of ``is_grads_batched`` (torch's check_batched_grad) cannot batch. Batched vector-
    Jacobian products, and of the backward's own backward, equal one product per vector."""
    q, k, v, kw = case(which)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash.scaled_dot_product_attention(*leaves, **kw)
    vectors = torch.stack([randn(*out.shape, seed=20 + i) for i in range(3)])
    batched = torch.autograd.grad(out, leaves, vectors, is_grads_batched=True,
                                  create_graph=True)
    for i in range(3):
        one = torch.autograd.grad(out, leaves, vectors[i], retain_graph=True)
        for b, o in zip(batched, one, strict=True):
            assert rel_err(b[i], o) < 1e-13
    # the backward of the backward, batched over 2 more vectors
    second = torch.stack([randn(*q.shape, seed=30 + i) for i in range(2)])
    dq = batched[0][0]
    twice = torch.autograd.grad(dq, leaves, second, is_grads_batched=True, retain_graph=True)
    for i in range(2):
        one = torch.autograd.grad(dq, leaves, second[i], retain_graph=True)
        for b, o in zip(twice, one, strict=True):
            assert rel_err(b[i], o) < 1e-13


@pytest.mark.parametrize("contiguous", [True, False])
def test_pytorch_sdp_math_gradcheck_shapes_with_default_tiles(contiguous):
    """PyTorch's test_sdp_math_gradcheck shapes (packed QKV, (4, 2, 4, 16) after the transpose)
    with flash's default tiles under torch's batched gradcheck and gradgradcheck."""
    qkv = torch.rand(4, 4, 3 * 2 * 16, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(0)).requires_grad_()
    query, key, value = (t.view(4, -1, 2, 16).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    if contiguous:
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    inputs = (query, key, value)
    f = flash.scaled_dot_product_attention
    assert torch.autograd.gradcheck(f, inputs, check_batched_grad=True, fast_mode=True)
    assert torch.autograd.gradgradcheck(f, inputs, check_batched_grad=True, fast_mode=True)


# --- dropout under vmap: torch's randomness modes -------------------------------------------

def _dropped(fn, randomness):
    q, k, v, _ = case("plain")
    batch = torch.stack([q, q, q])
    return vmap(lambda q: fn(q, k, v, dropout_p=0.4), randomness=randomness)(batch)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_dropout_error_mode_raises_torchs_error(name):
    with pytest.raises(RuntimeError, match="randomness error mode") as ours:
        _dropped(IMPLEMENTATIONS[name], "error")
    with pytest.raises(RuntimeError) as theirs:
        _dropped(torch_math, "error")
    assert str(ours.value).split(".")[0] == str(theirs.value).split(".")[0]


@pytest.mark.parametrize("name", NAMES)
def test_vmap_dropout_same_mode_equals_torch(name):
    """randomness="same": one mask for the whole batch, torch's own, from the same seed."""
    torch.manual_seed(4)
    got = _dropped(IMPLEMENTATIONS[name], "same")
    after = torch.rand(3)
    torch.manual_seed(4)
    expected = _dropped(torch_math, "same")
    assert rel_err(got, expected) < 1e-13 and torch.equal(after, torch.rand(3))
    assert torch.equal(got[0], got[2])


def test_vmap_dropout_different_mode_is_refused_by_torch_for_flash():
    """randomness="different" wants a batched mask; flash draws its mask per query-row block
    from torch's stream (to equal the math kernel unbatched), which vmap can only give as the
    "same" mask, so torch itself refuses the in-place draw. The deliberate exception."""
    with pytest.raises(RuntimeError, match="different inplace randomness on an unbatched"):
        _dropped(small_flash, "different")
    out = _dropped(torch_math, "different")                      # torch: three masks
    assert not torch.equal(out[0], out[1])


def test_jvp_and_grad_with_dropout_equal_torch_math():
    """Forward mode and reverse mode through the same dropout mask as torch's math kernel, from
    the same seed (torch.func.grad included: the mask is drawn once, replayed in the backward)."""
    q, k, v, _ = case("gqa")
    tangents = tuple(randn(*t.shape, seed=10 + i) for i, t in enumerate((q, k, v)))
    results = []
    for fn in (small_flash, torch_math):
        def f(q, k, v, fn=fn):
            return fn(q, k, v, dropout_p=0.3, enable_gqa=True)
        torch.manual_seed(6)
        out, tangent = jvp(f, (q, k, v), tangents)
        torch.manual_seed(6)
        grads = grad(lambda *a: f(*a).sin().sum(), argnums=(0, 1, 2))(q, k, v)
        results.append((out, tangent, *grads))
    for a, b in zip(*results, strict=True):
        assert rel_err(a, b) < 1e-12
