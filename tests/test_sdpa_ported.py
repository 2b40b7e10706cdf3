"""PyTorch's own SDPA tests that apply to the CPU, ported and run for the three course
implementations beside a torch control column (issue 41: they must pass for ``flash`` wherever
they pass for torch).

From PyTorch's ``test/test_transformers.py``: ``test_scaled_dot_product_attention`` (math kernel
against a bmm/softmax/dropout reference under one seed, batch 0 and 5, 3-d and 4-d inputs, masks
of 2, 3 and 4 dims, causal, dropout 0 / 0.2 / 0.5, float64 and float32, then gradcheck) and
``test_sdp_math_gradcheck`` (packed, transposed, contiguous or not), with the defaults of
PyTorch's test-suite gradcheck (batched gradients, fast mode); from
``common_methods_invocations.py``: the ``nn.functional.scaled_dot_product_attention`` OpInfo's
samples under its gradcheck (``check_batched_grad``, ``check_undefined_grad``, fast mode, as
PyTorch's test wrapper runs it) and gradgradcheck where torch passes it. Rewritten here, not
copied: PyTorch's test utilities (``expecttest``) are not a dependency of the course.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_lib import IMPLEMENTATIONS

#: flash twice: with its default tiles (one tile covers these small inputs, so every slice of
#: the backward spans a whole dimension, where indexing returns ``aten::alias``: issue 55's
#: batched-gradient failures) and with tiles smaller than the inputs (``flash-tiled``)
COLUMNS = ["torch", *IMPLEMENTATIONS, "flash-tiled"]


def attend(column: str):
    """The implementation of one column; ``flash-tiled``: flash with 2×4 tiles."""
    if column == "torch":
        return F.scaled_dot_product_attention
    if column == "flash-tiled":
        return lambda *a, **kw: IMPLEMENTATIONS["flash"](*a, block_size=(2, 4), **kw)
    return IMPLEMENTATIONS[column]


#: the defaults of PyTorch's test-suite ``gradcheck`` wrapper (``common_utils.gradcheck``):
#: vmap over the backward (batched gradients) and fast mode (random projections of the Jacobian)
PYTORCH_GRADCHECK = dict(check_batched_grad=True, fast_mode=True)


def with_seed(fn, *args, **kwargs):
    """PyTorch's ``wrapper_set_seed``: every call draws the same dropout mask."""
    with torch.random.fork_rng():
        torch.manual_seed(42)
        return fn(*args, **kwargs)


# --- test_scaled_dot_product_attention (TestTransformers) -----------------------------------

def sdp_ref(q, k, v, attn_mask=None, dropout_p=0.0):
    """PyTorch's reference in that test: 3-d bmm, softmax (NaN on a fully masked row), dropout."""
    q = q / math.sqrt(q.size(-1))
    attn = torch.baddbmm(attn_mask, q, k.transpose(-2, -1)) if attn_mask is not None \
        else torch.bmm(q, k.transpose(-2, -1))
    attn = torch.softmax(attn, dim=-1)
    if dropout_p > 0.0:
        attn = F.dropout(attn, p=dropout_p)
    return torch.bmm(attn, v)


MASK_CASES = [(3, None, False), (3, 2, False), (3, 2, True), (3, 3, False), (3, 3, True),
              (4, None, False), (4, 2, False), (4, 2, True), (4, 4, False), (4, 4, True)]


def _mask_id(case):
    dim, mask_dim, causal = case
    return f"{dim}d-" + (f"{mask_dim}d{'-causal' if causal else ''}-mask" if mask_dim else "none")


@pytest.mark.parametrize("dropout_p", [0.0, 0.2, 0.5])
@pytest.mark.parametrize("case", MASK_CASES, ids=_mask_id)
@pytest.mark.parametrize("batch_size", [0, 5])
@pytest.mark.parametrize("column", COLUMNS)
def test_scaled_dot_product_attention(column, batch_size, case, dropout_p):
    input_dim, attn_mask_dim, is_causal = case
    fn = attend(column)
    N, N_prime, L, S, E = batch_size, 2, 4, 3, 6
    with sdpa_kernel(SDPBackend.MATH):
        for dtype in (torch.double, torch.float):
            torch.manual_seed(input_dim * 10 + (attn_mask_dim or 0) + batch_size)

            def rand(*shape, dtype=dtype):
                return torch.randn(shape, dtype=dtype)
            if input_dim == 3:
                query, key, value = rand(N, L, E), rand(N, S, E), rand(N, S, E)
            else:
                query, key, value = rand(N, N_prime, L, E), rand(N, N_prime, S, E), \
                    rand(N, N_prime, S, E)
            attn_mask = None
            if attn_mask_dim is not None:
                size = (L, S) if attn_mask_dim == 2 else \
                    ((N, L, S) if input_dim == 3 else (N, N_prime, L, S))
                attn_mask = torch.ones(size, dtype=torch.bool).tril() if is_causal \
                    else torch.randint(0, 2, size=size, dtype=torch.bool)
            with torch.random.fork_rng():
                mask_f = None
                if attn_mask is not None:
                    mask_f = torch.zeros_like(attn_mask, dtype=dtype).masked_fill(
                        attn_mask.logical_not(), float("-inf"))
                    if attn_mask_dim > 3:
                        mask_f = mask_f.view(-1, L, S)
                expected = sdp_ref(query.view(-1, L, E), key.view(-1, S, E),
                                   value.view(-1, S, E), attn_mask=mask_f, dropout_p=dropout_p)
                if input_dim > 3:
                    expected = expected.view(-1, N_prime, L, E)
            with torch.random.fork_rng():
                if is_causal:
                    actual = fn(query, key, value, None, dropout_p, is_causal)
                    # torch 2.13 skips this check for an empty batch (it returns zeros); the
                    # course refuses the call whatever the sizes (tests/test_validation_order.py)
                    if column != "torch" or N > 0:
                        with pytest.raises(RuntimeError,
                                           match="Explicit attn_mask should not be set when "
                                                 "is_causal=True"):
                            fn(query, key, value, attn_mask, dropout_p, is_causal)
                else:
                    actual = fn(query, key, value, attn_mask, dropout_p, is_causal)
            if torch.isnan(expected).any():                # fully masked rows: torch gives 0
                rows = attn_mask.sum(dim=-1) == 0
                for _ in range(input_dim - attn_mask_dim - 1):
                    rows = rows.unsqueeze(0)
                rows = rows.expand(expected.shape[:-1])
                assert torch.isnan(expected[rows]).all()
                assert actual[rows].abs().sum() == 0
                torch.testing.assert_close(actual[~rows], expected[~rows])
                continue
            torch.testing.assert_close(actual, expected)
    if attn_mask_dim is None:
        q, k, v = (t.view(-1, n, E).double().clone().requires_grad_()
                   for t, n in ((query, L), (key, S), (value, S)))
        assert torch.autograd.gradcheck(lambda *a: with_seed(fn, *a), (q, k, v, None, dropout_p),
                                        **PYTORCH_GRADCHECK)


# --- test_sdp_math_gradcheck (TestSDPA) ------------------------------------------------------

@pytest.mark.parametrize("contiguous_inputs", [True, False])
@pytest.mark.parametrize("column", COLUMNS)
def test_sdp_math_gradcheck(column, contiguous_inputs):
    batch_size, seq_len, num_heads, head_dim = 4, 4, 2, 16
    torch.manual_seed(0)
    qkv = torch.rand(batch_size, seq_len, 3 * num_heads * head_dim, dtype=torch.float64,
                     requires_grad=True)                    # packed, as rand_sdpa_tensor makes it
    query, key, value = qkv.chunk(3, dim=-1)
    query, key, value = (t.view(batch_size, -1, num_heads, head_dim).transpose(1, 2)
                         for t in (query, key, value))
    if contiguous_inputs:
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    fn = attend(column)
    with sdpa_kernel(SDPBackend.MATH):
        assert torch.autograd.gradcheck(lambda *a: with_seed(fn, *a),
                                        (query, key, value, None, 0.0, False),
                                        **PYTORCH_GRADCHECK)


# --- the OpInfo samples under PyTorch's gradcheck ---------------------------------------------

def opinfo_samples(dtype=torch.float64):
    """``sample_inputs_scaled_dot_product_attention``'s distinct samples: 3-d, 4-d and a
    broadcast query, causal or not, dropout 0 or 0.5; and a 4-d call with a float (L, S) mask."""
    batch, seq_q, seq_kv, heads, head_dim = 4, 3, 6, 4, 8
    shapes = [((batch, seq_q, head_dim), (batch, seq_kv, head_dim)),
              ((batch, heads, seq_q, head_dim), (batch, heads, seq_kv, head_dim)),
              ((heads, seq_q, head_dim), (batch, heads, seq_kv, head_dim))]
    samples = []
    for n, ((q_shape, kv_shape), causal, p) in enumerate(
            itertools.product(shapes, [True, False], [0.0, 0.5])):
        samples.append((f"{len(q_shape)}d{'-bcast' if n >= 8 else ''}"
                        f"{'-causal' if causal else ''}-p{p}",
                        (q_shape, kv_shape, kv_shape), None, causal, p))
    samples.append(("4d-float-mask", ((batch, heads, seq_q, head_dim),
                                      (batch, heads, seq_kv, head_dim),
                                      (batch, heads, seq_kv, head_dim)), (seq_q, seq_kv),
                    False, 0.0))
    return samples


SAMPLES = opinfo_samples()


def _make(sample, seed=0):
    _, shapes, mask_shape, causal, p = sample
    gen = torch.Generator().manual_seed(seed)
    tensors = [torch.testing.make_tensor(s, device="cpu", dtype=torch.float64,
                                         requires_grad=True, low=-3, high=3)
               for s in shapes]
    if mask_shape is not None:
        tensors.append(torch.rand(mask_shape, generator=gen, dtype=torch.float64)
                       .requires_grad_())
    return tensors, dict(is_causal=causal, dropout_p=p)


def _opinfo_gradcheck(column, sample, check: str) -> bool:
    torch.manual_seed(1)
    tensors, kw = _make(sample)
    fn = attend(column)

    def call(q, k, v, *mask):
        return with_seed(fn, q, k, v, *mask, **kw)
    if check == "grad":
        return torch.autograd.gradcheck(call, tensors, check_grad_dtypes=True,
                                        check_undefined_grad=True, **PYTORCH_GRADCHECK)
    return torch.autograd.gradgradcheck(call, tensors, **PYTORCH_GRADCHECK)


def _torch_passes(sample, check: str) -> str:
    """'' if the torch column passes this check, else torch's failure."""
    try:
        assert _opinfo_gradcheck("torch", sample, check)
    except Exception as err:                                # any failure of torch's
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return ""


@pytest.mark.parametrize("sample", SAMPLES, ids=[s[0] for s in SAMPLES])
@pytest.mark.parametrize("column", COLUMNS)
def test_opinfo_gradcheck(column, sample):
    """TestBwdGradients.test_fn_grad: every sample passes for torch, so for every column."""
    assert _opinfo_gradcheck(column, sample, "grad")


@pytest.mark.parametrize("sample", SAMPLES, ids=[s[0] for s in SAMPLES])
@pytest.mark.parametrize("column", [*IMPLEMENTATIONS, "flash-tiled"])
def test_opinfo_gradgradcheck_wherever_torch_passes(column, sample):
    """TestBwdGradients.test_fn_gradgrad (skipped by PyTorch on the CPU: its fused CPU kernel
    has no double backward): where torch's default kernel passes, every column must; flash
    and reference pass everywhere."""
    if column == "sdpa" and (why := _torch_passes(sample, "gradgrad")):
        pytest.skip(f"torch fails this too: {why}")
    assert _opinfo_gradcheck(column, sample, "gradgrad")


def test_the_samples_are_the_opinfos():
    assert len(SAMPLES) == 13
    assert sum(s[4] > 0 for s in SAMPLES) == 6 and sum(s[3] for s in SAMPLES) == 6
