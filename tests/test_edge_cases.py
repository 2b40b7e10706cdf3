"""The edges torch handles, for all three implementations, with torch's MATH kernel as the oracle.

Classes (issue 17): empty dimensions (also under ``torch.compile``), ``torch.nn.attention.bias``
masks (both causal alignments, L < S, L = S, L > S), every broadcast shape of bool and float
masks, long L with short S and the reverse, low-precision gradients, and the one deliberate
difference from torch: ``attn_mask`` with ``is_causal=True``.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F
from attention_cases import TOL, rel_err
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import CausalBias, causal_lower_right, causal_upper_left

from course_lib import IMPLEMENTATIONS, masks

NAMES = list(IMPLEMENTATIONS)


def torch_math(*args, **kwargs) -> torch.Tensor:
    """torch's reference C++ kernel: the oracle for every edge below."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def attend(name: str, *args, block_size=(2, 3), **kwargs) -> torch.Tensor:
    """Run implementation ``name``; flash with small tiles so that masks are cut into tiles."""
    if name == "flash":
        kwargs["block_size"] = block_size
    return IMPLEMENTATIONS[name](*args, **kwargs)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def forward_backward(fn, inputs, grad_seed=0, **kwargs):
    """``(out, grads)`` of ``fn(q, k, v, **kwargs)``; grads for q, k, v and a float mask if it
    requires grad. The same seeded ``grad_out`` for every ``fn`` given the same shapes."""
    wrt = list(inputs)
    mask = kwargs.get("attn_mask")
    if isinstance(mask, torch.Tensor) and mask.requires_grad:
        wrt.append(mask)
    out = fn(*inputs, **kwargs)
    gen = torch.Generator().manual_seed(grad_seed)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)
    # an input that does not reach the output gets a zero gradient, not None (torch's kernels
    # differ on whether an empty mask is in the graph; the gradient is zero either way)
    return out, torch.autograd.grad(out, wrt, grad_out, materialize_grads=True)


def _err(got: torch.Tensor, expected: torch.Tensor) -> float:
    """‖got − expected‖ / max(‖expected‖, 1): relative, absolute for near-zero gradients (a mask
    broadcast along S has a zero gradient up to rounding noise)."""
    diff = (got.double() - expected.double()).norm().item()
    return diff / max(expected.double().norm().item(), 1.0)


def assert_matches(got, expected, tol, label=""):
    (out, grads), (e_out, e_grads) = got, expected
    assert out.shape == e_out.shape and out.dtype == e_out.dtype, label
    assert torch.isfinite(out).all() == torch.isfinite(e_out).all(), label
    assert rel_err(out, e_out) <= tol, f"output {label}: {rel_err(out, e_out):.2e}"
    assert len(grads) == len(e_grads), label
    for g, e, what in zip(grads, e_grads, ["dq", "dk", "dv", "dmask"], strict=False):
        assert g.shape == e.shape and g.dtype == e.dtype, f"{what} {label}"
        assert torch.isfinite(g).all(), f"{what} not finite {label}"
        assert _err(g, e) <= tol, f"{what} {label}: {_err(g, e):.2e}"


def randn(*shape, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


# --- empty dimensions -----------------------------------------------------------------------

#: (batch, L, S, E, Ev): each zero on its own, and together
EMPTY = {
    "L=0": ((2, 3), 0, 5, 4, 3),
    "S=0": ((2, 3), 4, 0, 4, 3),
    "E=0": ((2, 3), 4, 5, 0, 3),
    "Ev=0": ((2, 3), 4, 5, 4, 0),
    "batch=0": ((0, 3), 4, 5, 4, 3),
    "heads=0": ((2, 0), 4, 5, 4, 3),
    "L=S=0": ((2,), 0, 0, 4, 3),
    "E=Ev=0": ((2,), 4, 5, 0, 0),
    "S=E=0": ((2,), 4, 0, 0, 3),
    "all=0": ((0,), 0, 0, 0, 0),
}
EMPTY_KWARGS = {
    "plain": lambda L, S, dt: {},
    "scale": lambda L, S, dt: {"scale": 0.7},
    "causal": lambda L, S, dt: {"is_causal": True},
    "bool": lambda L, S, dt: {"attn_mask": torch.rand(L, S, generator=torch.Generator()
                                                      .manual_seed(1)) < 0.6},
    "float": lambda L, S, dt: {"attn_mask": randn(L, S, dtype=dt, seed=2).requires_grad_()},
    "lower_right": lambda L, S, dt: {"attn_mask": causal_lower_right(L, S)},
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["f64", "bf16"])
@pytest.mark.parametrize("dims", list(EMPTY))
@pytest.mark.parametrize("name", NAMES)
def test_empty_dimensions_match_torch(name, dims, dtype):
    """Shapes, dtypes, values (zeros for S = 0, uniform weights for E = 0) and gradients."""
    batch, L, S, E, Ev = EMPTY[dims]
    q, k, v = (randn(*batch, n, e, dtype=dtype, seed=i)
               for i, (n, e) in enumerate([(L, E), (S, E), (S, Ev)]))
    for kind, make in EMPTY_KWARGS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # causal_lower_right warns when L > S
            kwargs = make(L, S, dtype)
        expected = forward_backward(torch_math, leaves(q, k, v), **kwargs)
        got = forward_backward(lambda *a, **kw: attend(name, *a, **kw), leaves(q, k, v),
                               **kwargs)
        assert_matches(got, expected, TOL[dtype], f"{name} {dims} {kind}")


def test_empty_cases_are_not_trivial():
    """E = 0 is uniform attention (an average of V), S = 0 gives zeros: real values to match."""
    q, k, v = randn(2, 4, 0), randn(2, 5, 0), randn(2, 5, 3)
    out = torch_math(q, k, v)
    assert torch.allclose(out, v.mean(dim=-2, keepdim=True).expand(2, 4, 3))
    assert torch.equal(torch_math(randn(2, 4, 3), randn(2, 0, 3), randn(2, 0, 2)),
                       torch.zeros(2, 4, 2, dtype=torch.float64))


def _zero_length_inputs(length: str):
    L, S = (0, 6) if length == "L" else (5, 0)
    return leaves(randn(2, 3, L, 4), randn(2, 3, S, 4, seed=1), randn(2, 3, S, 3, seed=2))


@functools.cache
def _torch_compiles_zero_length(length: str) -> str:
    """'' if torch compiles its own SDPA with this length 0, else torch's error."""
    torch._dynamo.reset()
    try:
        torch.compile(F.scaled_dot_product_attention, dynamic=True, backend="eager")(
            *_zero_length_inputs(length), is_causal=True)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    finally:
        torch._dynamo.reset()
    return ""


@pytest.mark.parametrize("length", ["L", "S"])
@pytest.mark.parametrize("name", NAMES)
def test_zero_length_under_torch_compile(name, length):
    """``torch.compile(dynamic=True)`` traces a zero length (dynamo specializes 0) as torch does.
    The "eager" backend keeps it fast: dynamo's tracing with fake tensors is what used to fail
    ("cannot reshape tensor of 0 elements")."""
    from torch._dynamo.testing import CompileCounter

    if why := _torch_compiles_zero_length(length):
        pytest.skip(f"torch cannot compile its own SDPA for {length}=0: {why}")
    counter = CompileCounter()  # the "eager" backend, counting what dynamo hands it
    compiled = torch.compile(IMPLEMENTATIONS[name], dynamic=True, backend=counter)
    try:
        expected = forward_backward(torch_math, _zero_length_inputs(length), is_causal=True)
        got = forward_backward(compiled, _zero_length_inputs(length), is_causal=True)
    finally:
        torch._dynamo.reset()
    assert_matches(got, expected, 1e-12, f"{name} {length}=0 compiled")
    assert counter.frame_count >= 1  # dynamo really traced it


# --- masks from torch.nn.attention.bias, both alignments ------------------------------------

#: (L, S): L < S, L = S, L > S, single rows/columns, empty
LENGTHS = [(3, 7), (5, 5), (7, 3), (1, 6), (6, 1), (0, 4), (4, 0), (9, 20)]
BIASES = {"upper_left": causal_upper_left, "lower_right": causal_lower_right}


@pytest.mark.parametrize("L,S", LENGTHS)
@pytest.mark.parametrize("variant", list(BIASES))
@pytest.mark.parametrize("name", NAMES)
def test_causal_bias_matches_torch(name, variant, L, S):
    """The bias's storage is uninitialised memory: only its variant and lengths may count."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lower right with L > S warns about NaN (gives zeros)
        bias = BIASES[variant](L, S)
    assert isinstance(bias, CausalBias)
    align = "top_left" if variant == "upper_left" else "bottom_right"
    plain = masks.causal_mask(L, S, align=align)           # the same mask, as a plain tensor
    for dtype in (torch.float64, torch.bfloat16):
        q, k, v = randn(2, 2, L, 4, dtype=dtype), randn(2, 1, S, 4, dtype=dtype, seed=1), \
            randn(1, 2, S, 5, dtype=dtype, seed=2)
        expected = forward_backward(torch_math, leaves(q, k, v), attn_mask=bias)
        for mask in (bias, plain):
            got = forward_backward(lambda *a, **kw: attend(name, *a, **kw), leaves(q, k, v),
                                   attn_mask=mask)
            assert_matches(got, expected, TOL[dtype],
                           f"{name} {variant} L={L} S={S} {dtype} {type(mask).__name__}")


#: bias lengths other than the inputs' (3, 7): broadcast, ignored (upper left) or refused
OTHER_LENGTHS = [(1, 7), (3, 1), (1, 1), (4, 4), (5, 9), (3, 8)]


@pytest.mark.parametrize("Lb,Sb", OTHER_LENGTHS)
@pytest.mark.parametrize("variant", list(BIASES))
@pytest.mark.parametrize("name", NAMES)
def test_causal_bias_with_other_lengths_follows_torch(name, variant, Lb, Sb):
    """torch reads upper left (and equal lengths) as ``is_causal=True``, ignoring the lengths,
    and materializes lower right, which must then broadcast: we follow, raise where it raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lower right with Lb > Sb warns about NaN (gives zeros)
        bias = BIASES[variant](Lb, Sb)
    q, k, v = randn(2, 3, 4), randn(2, 7, 4, seed=1), randn(2, 7, 2, seed=2)
    try:
        expected = forward_backward(torch_math, leaves(q, k, v), attn_mask=bias)
    except RuntimeError:
        with pytest.raises(ValueError, match="not broadcastable"):
            attend(name, q, k, v, attn_mask=bias)
        return
    got = forward_backward(lambda *a, **kw: attend(name, *a, **kw), leaves(q, k, v),
                           attn_mask=bias)
    assert_matches(got, expected, 1e-12, f"{name} {variant} ({Lb}, {Sb})")


@pytest.mark.parametrize("name", NAMES)
def test_causal_bias_with_gqa_and_scale(name):
    q, k, v = randn(2, 4, 3, 8), randn(2, 2, 6, 8, seed=1), randn(2, 2, 6, 3, seed=2)
    kw = dict(attn_mask=causal_lower_right(3, 6), enable_gqa=True, scale=0.3)
    assert_matches(forward_backward(lambda *a, **k_: attend(name, *a, **k_), leaves(q, k, v),
                                    **kw),
                   forward_backward(torch_math, leaves(q, k, v), **kw), 1e-12, name)


@pytest.mark.parametrize("name", NAMES)
def test_causal_bias_with_is_causal_raises_like_torch(name):
    q = randn(1, 3, 4)
    bias = causal_lower_right(3, 3)
    with pytest.raises(ValueError, match="CausalBias"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=bias, is_causal=True)
    with pytest.raises(ValueError, match="CausalBias"):
        IMPLEMENTATIONS[name](q, q, q, attn_mask=bias, is_causal=True)


def test_reference_weights_accept_causal_bias():
    from course_lib import reference
    q, k = randn(2, 3, 4), randn(2, 5, 4, seed=1)
    w = reference.attention_weights(q, k, attn_mask=causal_lower_right(3, 5))
    assert torch.all(w[:, ~masks.causal_mask(3, 5, align="bottom_right")] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("L,S", [(0, 3), (3, 0), (2, 5), (5, 2), (4, 4), (1, 1)])
def test_causal_mask_alignments_are_torchs(L, S):
    top, bottom = (masks.causal_mask(L, S, align=a) for a in ("top_left", "bottom_right"))
    i, j = torch.arange(L)[:, None], torch.arange(S)
    assert torch.equal(top, (j <= i).expand(L, S)) and torch.equal(top, masks.causal_mask(L, S))
    assert torch.equal(bottom, (j <= i + (S - L)).expand(L, S))
    if L == S:
        assert torch.equal(top, bottom)
    q, k = randn(L, 3), randn(S, 3, seed=1)
    for align, bias in (("top_left", causal_upper_left), ("bottom_right", causal_lower_right)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = torch_math(q, k, k, attn_mask=bias(L, S))
        assert torch.equal(torch_math(q, k, k, attn_mask=masks.causal_mask(L, S, align=align)),
                           expected)
    with pytest.raises(ValueError, match="align"):
        masks.causal_mask(2, 3, align="lower_right")


# --- every broadcast shape of bool and float masks ------------------------------------------

B, H, L_, S_ = 2, 3, 5, 6


def _broadcast_shapes():
    """Every shape broadcastable to (B, H, L, S) with 2, 3 or 4 dims: each dim full or 1."""
    full = (B, H, L_, S_)
    for ndim in (2, 3, 4):
        for keep in itertools.product([True, False], repeat=ndim):
            yield tuple(d if k else 1 for d, k in zip(full[-ndim:], keep, strict=True))


MASK_SHAPES = list(_broadcast_shapes())


def _mask(kind: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=gen) < 0.7
    if shape[-2] > 1:
        keep[..., 1, :] = False                                  # a fully masked row
    if kind == "bool":
        return keep
    return (2 * torch.randn(shape, generator=gen, dtype=torch.float64)).masked_fill(
        ~keep, float("-inf")).requires_grad_()


@pytest.mark.parametrize("shape", MASK_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", NAMES)
def test_every_broadcast_mask_shape(name, shape):
    """Bool and float (with -inf, and its gradient) masks, a fully masked row where L > 1."""
    q, k, v = randn(B, H, L_, 4), randn(B, H, S_, 4, seed=1), randn(B, H, S_, 3, seed=2)
    for kind in ("bool", "float"):
        mask = _mask(kind, shape, seed=len(shape))
        expected = forward_backward(torch_math, leaves(q, k, v), attn_mask=mask)
        got = forward_backward(lambda *a, **kw: attend(name, *a, **kw), leaves(q, k, v),
                               attn_mask=mask)
        assert_matches(got, expected, 1e-12, f"{name} {kind} {shape}")


def test_broadcast_shapes_are_all_there():
    assert len(MASK_SHAPES) == 4 + 8 + 16 == len(set(MASK_SHAPES))
    for s in [(L_, S_), (1, S_), (L_, 1), (B, H, L_, S_), (1, 1, L_, S_), (B, 1, L_, S_),
              (1, H, 1, S_), (B, 1, 1, S_)]:
        assert s in MASK_SHAPES


# --- long L with short S, and the reverse ---------------------------------------------------

LONG = {"long L": (1030, 17), "long S": (17, 1030)}
LONG_MASKS = {
    "none": lambda L, S: {},
    "causal": lambda L, S: {"is_causal": True},
    "lower_right": lambda L, S: {"attn_mask": causal_lower_right(L, S)},
    "bool": lambda L, S: {"attn_mask": _mask("bool", (1, L, S), seed=3)},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("kind", list(LONG_MASKS))
@pytest.mark.parametrize("shape", list(LONG))
@pytest.mark.parametrize("name", NAMES)
def test_long_and_short_lengths(name, shape, kind, dtype):
    """Default tile sizes: L = 1030 spans two query blocks, S = 1030 three key blocks."""
    L, S = LONG[shape]
    q, k, v = randn(1, L, 8, dtype=dtype), randn(1, S, 8, dtype=dtype, seed=1), \
        randn(1, S, 8, dtype=dtype, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = LONG_MASKS[kind](L, S)
        expected = forward_backward(torch_math, leaves(q, k, v), **kwargs)
    got = forward_backward(IMPLEMENTATIONS[name], leaves(q, k, v), **kwargs)
    assert_matches(got, expected, TOL[dtype], f"{name} {shape} {kind}")


# --- low precision: probabilities kept in float32 -------------------------------------------

def _dk_error(fn, seed, dtype):
    """Relative error of dK (grad of out.sum()) against the float64 truth, issue 17's example:
    B=2, L=1030, S=17, E=8, no mask."""
    base = [randn(2, n, 8, seed=seed + i) for i, n in enumerate((1030, 17, 17))]
    x64 = leaves(*base)
    truth = torch.autograd.grad(F.scaled_dot_product_attention(*x64).sum(), x64)[1]
    low = leaves(*(t.to(dtype) for t in base))
    dk = torch.autograd.grad(fn(*low).sum(), low)[1]
    return rel_err(dk, truth), dk


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_gradients_as_accurate_as_torch_math(name, dtype, seed=0):
    """Rounding the probabilities to bf16 before P·V (the old reference) made dK ~1.4x less
    accurate than torch's math kernel, which keeps them in float32 and rounds once at the end."""
    math_err, math_dk = _dk_error(torch_math, seed, dtype)
    err, dk = _dk_error(IMPLEMENTATIONS[name], seed, dtype)
    assert err <= 1.1 * math_err, f"{name}: dK error {err:.2e} vs torch math {math_err:.2e}"
    assert rel_err(dk, math_dk) <= 1e-3  # the same float32 computation, rounded once


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_reference_weights_come_back_in_the_input_dtype(dtype):
    from course_lib import reference
    q, k = randn(2, 5, 4, dtype=dtype), randn(2, 7, 4, dtype=dtype, seed=1)
    w = reference.attention_weights(q, k)
    assert w.dtype == dtype
    assert rel_err(w, torch.softmax(q.double() @ k.double().mT / 2, dim=-1)) <= TOL[dtype]


# --- attn_mask with is_causal=True: the deliberate difference ------------------------------

def test_attn_mask_with_is_causal_torch_combines_we_raise():
    """torch's docs call this an error. torch 2.13 raises in its math kernel, but its default
    CPU kernel (flash, chosen for 4-d inputs with E = Ev) applies mask AND causal silently. We
    raise. If torch's behaviour changes, this test says so."""
    q, k, v = randn(1, 2, 4, 8, dtype=torch.float32), randn(1, 2, 6, 8, dtype=torch.float32,
                                                           seed=1), \
        randn(1, 2, 6, 8, dtype=torch.float32, seed=2)
    mask = torch.tensor([[True, False, True, True, True, True]]).expand(4, 6)
    both = masks.combine_masks(mask, masks.causal_mask(4, 6))
    # torch's default path: no error, the result of the combined mask
    combined = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
    assert torch.allclose(combined, F.scaled_dot_product_attention(q, k, v, attn_mask=both),
                          atol=1e-6)
    assert not torch.allclose(combined, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    # torch's math kernel: the documented error
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        torch_math(q, k, v, attn_mask=mask, is_causal=True)
    # the course: the documented error everywhere, saying what torch does and what to do
    for name in NAMES:
        with pytest.raises(ValueError, match="(?s)not both.*silently applies both.*combine_masks"):
            IMPLEMENTATIONS[name](q, k, v, attn_mask=mask, is_causal=True)
        assert torch.allclose(IMPLEMENTATIONS[name](q, k, v, attn_mask=both), combined,
                              atol=1e-6)


@pytest.mark.parametrize("variant", list(BIASES))
def test_sdpa_backend_report_and_pinned_backends_take_causal_bias(variant):
    """sdpa hands the bias to torch: pinned kernels run it, and the report names the kernel
    torch picks for the mask the bias stands for."""
    from course_lib import sdpa
    q, k = randn(1, 2, 3, 8, dtype=torch.float32), randn(1, 2, 5, 8, dtype=torch.float32, seed=1)
    align = "top_left" if variant == "upper_left" else "bottom_right"
    plain = masks.causal_mask(3, 5, align=align)
    expected = torch_math(q, k, k, attn_mask=plain)
    report = sdpa.backend_report(q, k, k, attn_mask=BIASES[variant](3, 5))
    assert report.chosen == sdpa.backend_report(q, k, k, attn_mask=plain).chosen
    for backend, ok in report.eligible.items():
        if ok:
            out = sdpa.scaled_dot_product_attention(q, k, k, attn_mask=BIASES[variant](3, 5),
                                                    backend=backend)
            assert rel_err(out, expected) <= TOL[torch.float32], backend
