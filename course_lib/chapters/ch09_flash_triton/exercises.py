"""Chapter 9 (FlashAttention in Triton): ``triton_softmax``, ``triton_matmul`` and
``triton_flash_forward``, checked on a CPU under Triton's interpreter.

The learner's launcher is called by the generic engine like any other exercise. What Triton's
interpreter does not check is added by :mod:`.checking` (imported here, so it is active whenever
these exercises are): every ``tl.load``/``tl.store`` is bounds-checked, ``tl.dot`` obeys the GPU's
minimum K and each kernel's source is read for what does not compile on a GPU; a violation stops
the learner's call with a message naming the kernel, the program id and the offsets. The known
mistakes below are float64 simulations of the buggy kernels, so the engine can name them. Torch's
matrix products, softmax and attention are forbidden, the largest case may not hold an N×N
tensor, and each exercise's extension (:class:`.checking.TritonLaunchCheck`) refuses a result
that no kernel launched during the call wrote: the work has to happen inside a Triton kernel.

Without Triton (other platforms) the exercises are still declared, and their solutions say why
they cannot run.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.dispatch_mode import EagerDispatchMode

from . import TRITON_AVAILABLE, TRITON_MISSING

#: The checker's bounds checks run inside the learner's kernel launch: calls into them are allowed.
CHECKING = f"{__package__}.checking"
#: The host rule's dispatch mode sees each torch operator the learner's code calls.
HOST_RULE = f"{__name__}._HostOps.__torch_dispatch__"

if TRITON_AVAILABLE:
    import triton

    from . import checking  # installs the bounds and GPU-rule checks; the launch check
    from .kernels import (
        flash_bwd_delta_kernel,
        flash_bwd_dkdv_kernel,
        flash_bwd_dq_kernel,
        flash_fwd_kernel,
        matmul_kernel,
        softmax_kernel,
    )
else:  # pragma: no cover - exercised on platforms without Triton wheels
    def _missing(*args, **kwargs):
        raise RuntimeError(TRITON_MISSING)

    flash_fwd_kernel = matmul_kernel = softmax_kernel = triton = _missing  # type: ignore
    flash_bwd_delta_kernel = flash_bwd_dkdv_kernel = flash_bwd_dq_kernel = _missing  # type: ignore

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


#: What torch may do on the host in a Triton exercise: allocate, view, copy and cast (a dtype
#: conversion is not computation), read a scalar. Any other operator on a floating tensor is the
#: answer computed by torch, not by the kernel.
HOST_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "arange", "_to_copy", "copy_", "clone", "contiguous", "detach", "alias",
    "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "view", "_unsafe_view", "reshape",
    "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand", "unsqueeze",
    "squeeze", "select", "slice", "split", "split_with_sizes", "unbind", "narrow", "view_as",
    "resize_", "set_", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_same_size", "_has_compatible_shallow_copy_type", "record_stream", "unfold",
    "_make_per_tensor_quantized_tensor", "result_type", "is_nonzero"})


class _HostOps(EagerDispatchMode):
    """Records the first operator outside :data:`HOST_OPS` that touches a floating tensor, and
    which tensors were dtype casts of which (``_to_copy`` / ``copy_``), so that a kernel's result
    cast back on the host still counts as the kernel's."""

    def __init__(self) -> None:
        super().__init__()
        self.computed: str | None = None
        self.casts: list[tuple[torch.Tensor, torch.Tensor]] = []   # (result, source)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "clone") and isinstance(out, torch.Tensor) and args:
            self.casts.append((out, args[0]))
        elif name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            self.casts.append((args[0], args[1]))
        elif name not in HOST_OPS and self.computed is None:
            flat = [*args, *kwargs.values()]
            if any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in flat):
                self.computed = name
        return out


class _TritonHostRule(checking.TritonLaunchCheck if TRITON_AVAILABLE else object):
    """:class:`.checking.TritonLaunchCheck` and the host rule of the Triton exercises (their
    statements say it): torch may allocate, view, copy and cast the inputs and the result, but
    not compute on them; the result is computed in the kernel from the values it loaded."""

    @contextlib.contextmanager
    def around_call(self) -> Iterator[Any]:
        host = _HostOps()
        with super().around_call() as judge, host:
            recorder = checking._RECORDERS[-1]
            yield lambda value: self._judge(judge, host, bool(recorder.kernels), value)

    @staticmethod
    def _judge(judge: Any, host: _HostOps, launched: bool, value: Any
               ) -> tuple[str, str] | None:
        if not launched:        # plain torch: no kernel at all, the launch check says so
            return judge(value)
        if host.computed is not None:
            return "computed_in_torch", (
                f"Your function computed with torch on the host (torch's `{host.computed}`): in "
                "this exercise torch may allocate, view, copy and cast tensors, but the result "
                "is computed inside your Triton kernel, from the values it loads")
        return judge(_cast_sources(value, host.casts))


def _cast_sources(value: Any, casts: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``value`` with each returned tensor that is a host cast (or copy) of another replaced by
    that source, followed back to the first: a kernel's output cast back is the kernel's."""
    def source(t: Any) -> Any:
        for _ in range(len(casts)):
            found = next((s for r, s in casts if r is t), None)
            if found is None:
                break
            t = found
        return t
    if isinstance(value, torch.Tensor):
        return source(value)
    if isinstance(value, tuple | list):
        return type(value)(source(v) for v in value)
    return value


def _launch_check(*output_names: str):
    """The extension that makes a check refuse a result no Triton kernel wrote, or one torch
    computed on the host (none without Triton: the solutions say why they cannot run)."""
    return _TritonHostRule(output_names) if TRITON_AVAILABLE else None
#: Block sizes a learner's kernel plausibly uses: block-dependent mistakes are simulated for each.
BLOCKS = (16, 32, 64)
CHAPTER = "09_flash_triton"
#: Query rows a mistake's simulation takes at once: fewer than the largest case's N = 100, so that
#: no simulation holds an N×N tensor (refused during a check, as for a learner's code).
SIM_ROWS = 64
#: Seconds per call. Triton's interpreter runs every program of the grid as Python, one after the
#: other: a right kernel with the smallest legal tiles (16 × 16) must finish well inside these on
#: a loaded 2-core machine (bench/check_latency.py --triton measures it).
TIME_LIMITS = {"triton_softmax": 30.0, "triton_matmul": 30.0, "triton_flash_forward": 90.0,
               "triton_flash_backward": 120.0}


def _time_note(limit: float) -> str:
    return (f"Triton's interpreter runs each program of your grid as plain Python, so kernels are "
            f"slow here, but a right kernel with 16 × 16 tiles finishes each case in a few "
            f"seconds; the limit is {limit:.0f} s. Look for a loop that never ends (a `while`) or "
            f"that visits far more blocks than needed (each program should visit cdiv(S, BLOCK_N) "
            f"key blocks, causal ones only up to the diagonal), or a grid much larger than "
            f"cdiv(L, BLOCK_M) × B·H.")

# --------------------------------------------------------------------------- row softmax


def _softmax_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, s: float = 1.0) -> torch.Tensor:
        return s * torch.randn(*shape, generator=gen)

    with_inf = r(6, 5)
    with_inf[0, 1] = with_inf[3, 4] = with_inf[5, 0] = float("-inf")
    return [
        Case("10 columns (not a power of two)", (r(4, 10),)),
        Case("one column", (r(3, 1),)),
        Case("64 columns", (r(2, 64),)),
        Case("entries in the hundreds", (r(5, 37, s=300.0),),
             note="exp overflows float32 unless the row maximum is subtracted"),
        Case("one long row", (r(1, 200),)),
        Case("-inf entries", (with_inf,), note="three entries are -inf (masked positions)"),
    ]


def _softmax_oracle(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a 2-D float32 tensor: one Triton program per row."""
    x = x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


def _softmax_no_shift(x):
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def _softmax_exp2(x):
    """exp2 where exp was meant: a softmax in base 2, 2^(x − m) / Σ 2^(x − m)."""
    p = torch.exp2(x.double() - x.double().amax(dim=-1, keepdim=True))
    return (p / p.sum(dim=-1, keepdim=True)).to(x.dtype)


def _softmax_unnormalised(x):
    return torch.exp(x.double() - x.double().amax(dim=-1, keepdim=True)).to(x.dtype)


def _softmax_pad_zero(x):
    """Masked lanes loaded as 0.0 instead of -inf: each adds exp(0 - m) to the sum."""
    n = x.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    padded = torch.cat([x.double(), torch.zeros(x.shape[0], width - n, dtype=torch.float64)], -1)
    p = torch.exp(padded - padded.amax(dim=-1, keepdim=True))
    return (p / p.sum(dim=-1, keepdim=True))[:, :n].to(x.dtype)


TRITON_SOFTMAX = Exercise(
    id="triton_softmax",
    chapter=CHAPTER,
    time_limit=TIME_LIMITS["triton_softmax"],
    extension=_launch_check(),
    time_limit_note=_time_note(TIME_LIMITS["triton_softmax"]),
    allowed_course_calls=(CHECKING, HOST_RULE),
    title="A row-softmax kernel",
    signature="triton_softmax(x (rows, cols) float32) -> (rows, cols), launching a Triton kernel",
    params=("x",),
    cases=_softmax_cases,
    oracle=_softmax_oracle,
    solution=triton_softmax,
    forbidden=("softmax",),
    hints=(
        "One program per row: grid = (rows,). Inside, tl.program_id(0) is the row; "
        "tl.arange(0, BLOCK) are the column offsets, with BLOCK = triton.next_power_of_2(cols) "
        "passed as a tl.constexpr.",
        "Columns past the end of the row must not be touched: mask = cols < n_cols on the load "
        "and on the store. On the load, other= decides what the masked lanes hold: choose a "
        "value that cannot change the max or the sum.",
        "x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float('-inf')); "
        "m = tl.max(x, axis=0); p = tl.exp(x - m); "
        "tl.store(y_ptr + row * n_cols + cols, p / tl.sum(p, axis=0), mask=mask)",
    ),
    mistakes=(
        Mistake("masked_lanes_zero", "Your masked lanes hold 0 (other=0.0, the default), so "
                "each padded column adds exp(0 - m) to the sum. Load them as other=float('-inf'): "
                "exp(-inf) = 0.", _softmax_pad_zero),
        Mistake("no_max_shift", "You exponentiated the raw entries: exp(300) overflows float32 "
                "to inf and inf / inf is NaN. Subtract the row maximum first: "
                "p = tl.exp(x - tl.max(x, axis=0)).", _softmax_no_shift),
        Mistake("exp2_without_log2e", "Your kernel uses tl.exp2 on the plain entries, so it "
                "computes a softmax in base 2, 2^(x − m) / Σ 2^(x − m), which is flatter than "
                "e^(x − m) / Σ e^(x − m). Use tl.exp, or multiply x − m by log2(e) = 1.4427... "
                "before tl.exp2 (the flash kernel's trick).", _softmax_exp2),
        Mistake("not_normalised", "You stored exp(x − m) without dividing by its row sum: "
                "store p / tl.sum(p, axis=0).", _softmax_unnormalised),
    ),
)

# --------------------------------------------------------------------------- tiled matmul


def _matmul_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    f16 = torch.float16
    return [
        Case("ragged: (20, 24) @ (24, 18)", (r(20, 24), r(24, 18))),
        Case("(33, 70) @ (70, 17)", (r(33, 70), r(70, 17)),
             note="K = 70 is not a multiple of a block"),
        Case("one row: (1, 16) @ (16, 5)", (r(1, 16), r(16, 5))),
        Case("float16: (48, 40) @ (40, 36)", (r(48, 40, dtype=f16), r(40, 36, dtype=f16)),
             note="16-bit tl.dot needs K ≥ 16 on a GPU"),
    ]


def _matmul_oracle(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def triton_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a (M, K) @ b (K, N)``: one Triton program per (32, 32) tile of the output."""
    a, b = a.contiguous(), b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_kernel[grid](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    return c


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in float64 from element-wise products (the mistakes run under the same
    forbidden-call watch as a learner's code when the tests submit them)."""
    return (a.double()[..., :, :, None] * b.double()[..., None, :, :]).sum(dim=-2)


def _last_k_block(block_k: int):
    def fn(a, b):
        start = (a.shape[1] - 1) // block_k * block_k
        return _product(a[:, start:], b[start:]).to(a.dtype)
    return fn


def _whole_k_blocks(block_k: int):
    """Only the whole K blocks summed (a loop over range(K // BLOCK_K)): the last K mod BLOCK_K
    columns of a and rows of b left out."""
    def fn(a, b):
        end = a.shape[1] // block_k * block_k
        if end == 0:
            return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
        return _product(a[:, :end], b[:end]).to(a.dtype)
    return fn


def _strides_swapped(which: str):
    """``a`` or ``b`` read as if stored column by column: element (r, c) at r + c·R."""
    def fn(a, b):
        if which == "a":
            a = a.reshape(a.shape[1], a.shape[0]).T
        else:
            b = b.reshape(b.shape[1], b.shape[0]).T
        return _product(a, b).to(a.dtype)
    return fn


_STRIDES = ("One of your loads uses swapped strides: a row-major (R, C) tensor holds element "
            "(r, c) at offset r·C + c, and your kernel reads a or b at r + c·R, as if stored "
            "column by column. For a (M, K) that is rows[:, None] * K + ks[None, :]; for b "
            "(K, N), ks[:, None] * N + cols[None, :].")

TRITON_MATMUL = Exercise(
    id="triton_matmul",
    chapter=CHAPTER,
    time_limit=TIME_LIMITS["triton_matmul"],
    extension=_launch_check(),
    time_limit_note=_time_note(TIME_LIMITS["triton_matmul"]),
    allowed_course_calls=(CHECKING, HOST_RULE),
    title="A tiled matmul kernel with tl.dot",
    signature="triton_matmul(a (M, K), b (K, N)) -> (M, N) same dtype, launching a Triton kernel",
    params=("a", "b"),
    cases=_matmul_cases,
    oracle=_matmul_oracle,
    solution=triton_matmul,
    forbidden=("matmul",),
    tolerances={torch.float32: (1e-4, 1e-4)},
    hints=(
        "A 2-D grid: program (i, j) owns the (BLOCK_M, BLOCK_N) tile of C with rows "
        "i·BLOCK_M + tl.arange(0, BLOCK_M) and columns j·BLOCK_N + tl.arange(0, BLOCK_N). "
        "Walk K in steps of BLOCK_K, adding tl.dot(a_tile, b_tile) to a float32 accumulator.",
        "Every load needs a 2-D mask (rows < M) & (ks < K) with other=0.0, so that the ragged "
        "edges add zeros; the store needs (rows < M) & (cols < N). On a GPU tl.dot needs "
        "BLOCK_K ≥ 16 for float16 inputs.",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32); for k0 in range(0, K, BLOCK_K): "
        "ks = k0 + tl.arange(0, BLOCK_K); a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], "
        "mask=..., other=0.0); b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=..., "
        "other=0.0); acc = tl.dot(a, b, acc). Then store acc.to(c_ptr.dtype.element_ty).",
    ),
    mistakes=tuple(
        Mistake(f"accumulator_overwritten_k{bk}", "Your result is the last K block's product "
                "only: acc = tl.dot(a, b) replaces the sum at every step. Accumulate: "
                "acc = tl.dot(a, b, acc) (or acc += tl.dot(a, b)).", _last_k_block(bk),
                family="accumulator_overwritten")
        for bk in BLOCKS
    ) + tuple(
        Mistake(f"k_tail_dropped_k{bk}", "Your K loop stops at the last whole block "
                "(range(K // BLOCK_K) or similar), so the last K mod BLOCK_K columns of a and "
                "rows of b are never added (and with K < BLOCK_K nothing is). Loop over "
                "range(0, K, BLOCK_K) and mask the ragged block: (ks < K) on both loads, "
                "other=0.0.", _whole_k_blocks(bk), family="k_tail_dropped")
        for bk in BLOCKS
    ) + tuple(
        Mistake(f"{which}_strides_swapped", _STRIDES, _strides_swapped(which),
                family="strides_swapped")
        for which in ("a", "b")
    ),
)

# --------------------------------------------------------------------------- FlashAttention-2


def _flash_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, s: float = 1.0) -> torch.Tensor:
        return s * torch.randn(*shape, generator=gen)

    def qkv(b: int, h: int, n: int, d: int) -> tuple[torch.Tensor, ...]:
        return r(b, h, n, d), r(b, h, n, d), r(b, h, n, d)

    # keys growing along the sequence: later key blocks raise the running maximum
    q, k, v = qkv(1, 1, 48, 16)
    k = k * torch.linspace(0.5, 3.0, 48)[:, None]
    big_q, big_k, big_v = qkv(1, 1, 40, 16)
    few_q, few_k, few_v = qkv(1, 2, 5, 16)
    many_q, many_k, many_v = qkv(1, 1, 100, 16)
    return [
        Case("L = 40 (not a multiple of the block)", (*qkv(1, 2, 40, 16), False)),
        Case("L = 40, causal", (*qkv(1, 2, 40, 16), True)),
        Case("L = 5 (smaller than a block)", (*qkv(1, 1, 5, 16), False)),
        Case("L = 7, causal, two batches", (*qkv(2, 1, 7, 16), True)),
        Case("the running maximum moves", (2.0 * q, k, v, False),
             note="later key blocks hold the larger scores"),
        Case("scores in the hundreds", (10.0 * big_q, 10.0 * big_k, big_v, False),
             note="exp2 of the raw scores overflows float32 unless the running maximum is "
                  "subtracted"),
        Case("values in the hundreds, one key block", (0.3 * few_q, few_k, 100.0 * few_v, False),
             note="V is 100× larger: float16 rounding of P or V shows"),
        Case("values in the hundreds, L = 100", (0.3 * many_q, many_k, 100.0 * many_v, False),
             note="V is 100× larger and there are many key blocks: a float16 accumulator "
                  "shows"),
        Case("E = 32, causal", (*qkv(2, 1, 33, 32), True)),
        Case("L = 100, causal", (*qkv(1, 2, 100, 16), True),
             note="no N×N tensor, N = 100: none with two dims >= 100, or as many elements",
             max_square=100),
    ]


def _scores(q, k, is_causal):
    """Scaled scores in float64, future keys (j > i) at -inf when causal."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
    return s


def _flash_oracle(q, k, v, is_causal=False):
    s = _scores(q, k, is_causal)
    out = torch.softmax(s, dim=-1) @ v.double()
    return out.to(q.dtype), s.logsumexp(dim=-1).to(torch.float32)


def triton_flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2 forward: ``(out (B, H, L, E), lse (B, H, L))`` from one Triton kernel."""
    B, H, N, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N, 32), B * H)              # (query block, batch · head)
    qk_scale = math.log2(math.e) / math.sqrt(D)      # log2(e) folded into 1/√D
    flash_fwd_kernel[grid](q, k, v, out, lse, N, qk_scale, IS_CAUSAL=is_causal,
                           BLOCK_M=32, BLOCK_N=32, D=D)
    return out, lse


def _flash_sim(q, k, v, is_causal=False, *, block=None, rescale_acc=True, rescale_l=True,
               pad_keys=False, factor=LOG2E, base=2.0, lse_scale=LN2, diag=0, lse_zero=False,
               leak_block=None, no_max=False, acc16=False, pv16=False, drop_tail=False,
               skip_diagonal=False, undivided=False, lse_no_max=False):
    """A float64 model of a (possibly buggy) kernel: key blocks of ``block``, scores times
    ``factor`` exponentiated in ``base``, lse = (m + log2 ℓ) · ``lse_scale``. ``no_max``: no
    running maximum (exp2 of the raw scores, in float32 as on the GPU); ``acc16``: the accumulator
    rounded to float16 after each key block; ``pv16``: P and V rounded to float16 before P·V;
    ``drop_tail``: the keys of the last, ragged key block never visited; ``skip_diagonal``
    (causal): only the key blocks before the query's own block of ``block`` rows visited;
    ``undivided``: O stored without the division by ℓ; ``lse_no_max``: lse = log ℓ, the running
    maximum left out.

    Query rows are processed ``SIM_ROWS`` at a time and products are element-wise, so that the
    model never holds an N×N matrix nor calls a matrix product."""
    options = dict(block=block, rescale_acc=rescale_acc, rescale_l=rescale_l, pad_keys=pad_keys,
                   factor=factor, base=base, lse_scale=lse_scale, diag=diag, lse_zero=lse_zero,
                   leak_block=leak_block, no_max=no_max, acc16=acc16, pv16=pv16,
                   drop_tail=drop_tail, skip_diagonal=skip_diagonal, undivided=undivided,
                   lse_no_max=lse_no_max)
    outs, lses = [], []
    for r0 in range(0, q.shape[-2], SIM_ROWS):
        o, lse = _flash_sim_rows(q, k, v, r0, min(r0 + SIM_ROWS, q.shape[-2]), is_causal,
                                 **options)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, -2).to(q.dtype), torch.cat(lses, -1).to(torch.float32)


def _flash_sim_rows(q, k, v, r0, r1, is_causal, *, block, rescale_acc, rescale_l, pad_keys,
                    factor, base, lse_scale, diag, lse_zero, leak_block, no_max, acc16, pv16,
                    drop_tail, skip_diagonal, undivided, lse_no_max):
    n = k.shape[-2]
    kd, vd = k.double(), v.double()
    width = n if block is None else -(-n // block) * block
    if pad_keys and width > n:   # lanes past N loaded as zeros and never masked
        extra = width - n
        kd = torch.cat([kd, kd.new_zeros(*kd.shape[:-2], extra, kd.shape[-1])], -2)
        vd = torch.cat([vd, vd.new_zeros(*vd.shape[:-2], extra, vd.shape[-1])], -2)
    qd = q.double()[..., r0:r1, :]
    x = (qd[..., :, None, :] * kd[..., None, :, :]).sum(-1) / math.sqrt(q.shape[-1])
    if is_causal:
        i = torch.arange(r0, r1)[:, None]
        j = torch.arange(x.shape[-1])[None, :]
        future = j > i + diag
        if leak_block is not None:   # key i + 1 leaks only inside query i's block
            future = future | ((j == i + 1) & ((i + 1) % leak_block == 0))
        if skip_diagonal:            # no key of the query's own block (nor after it)
            future = j >= i // block * block
        x = x.masked_fill(future, float("-inf"))
    if drop_tail and block is not None:   # keys past the last whole block never visited
        x, vd = x[..., :n // block * block], vd[..., :n // block * block, :]
    x = x * factor
    step = x.shape[-1] if block is None else block
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    ell = torch.zeros_like(m)
    acc = torch.zeros(*x.shape[:-1], vd.shape[-1], dtype=torch.float64)
    if pv16:
        vd = vd.half().double()
    for j0 in range(0, x.shape[-1], step):
        s = x[..., j0:j0 + step]
        m_new = m if no_max else torch.maximum(m, s.amax(dim=-1))
        alpha = torch.ones_like(m) if no_max else base ** (m - m_new)
        p = torch.exp2(s.float()).double() if no_max else base ** (s - m_new[..., None])
        ell = (alpha * ell if rescale_l else ell) + p.sum(dim=-1)
        pp = p.half().double() if pv16 else p          # float16 P·V: ℓ still sums float32 p
        pv = (pp[..., :, :, None] * vd[..., None, j0:j0 + step, :]).sum(-2)
        acc = (alpha[..., None] * acc if rescale_acc else acc) + pv
        if acc16:
            acc = acc.half().double()
        if no_max:   # the float32 sums overflow as the kernel's do
            ell, acc = ell.float().double(), acc.float().double()
        m = m_new
    if no_max or lse_no_max:
        m = torch.zeros_like(m)
    lse = torch.zeros_like(m) if lse_zero else (m + torch.log2(ell)) * lse_scale
    return (acc if undivided else acc / ell[..., None]), lse


def _sim(**options):
    return lambda q, k, v, is_causal=False: _flash_sim(q, k, v, is_causal, **options)


_BLOCK_MISTAKES = (
    ("scores_not_masked", "Your last, ragged key block counts keys that do not exist: the lanes "
     "past S were loaded as 0 (other=0.0), but their scores were not set to -inf, so each adds "
     "exp(0 - m) to ℓ. Mask the scores too: s = tl.where(keys[None, :] < S, s, float('-inf')).",
     {"pad_keys": True}),
    ("output_not_rescaled", "When a key block raises the running maximum, you did not rescale "
     "the accumulator: multiply O by α = exp2(m - m_new) before adding P V "
     "(acc = acc * alpha[:, None] + tl.dot(p, v)).", {"rescale_acc": False}),
    ("sum_not_rescaled", "When a key block raises the running maximum, you did not rescale the "
     "running sum: ℓ = α·ℓ + Σ p, with α = exp2(m - m_new).", {"rescale_l": False}),
    ("key_tail_dropped", "Your kernel never visits the last, ragged key block: the loop stops "
     "at the last whole block (range(0, S // BLOCK_N * BLOCK_N, ...) or similar), so the last "
     "S mod BLOCK_N keys are left out (and with S < BLOCK_N no key is seen at all). Loop over "
     "range(0, S, BLOCK_N) and mask the ragged block instead: keys < S on the loads, -inf on "
     "the scores.", {"drop_tail": True}),
    ("accumulator_float16", "Your accumulator O is float16: it is rounded to 11 significant "
     "bits after every key block, which shows as soon as the values are large. Keep m, ℓ and O "
     "in float32 (tl.zeros((BLOCK_M, E), dtype=tl.float32)); only the final store converts to "
     "the output's dtype.", {"acc16": True}),
    ("pv_float16", "Your P·V product runs in float16 (p and v cast with .to(tl.float16) before "
     "tl.dot): both are rounded to 11 significant bits, which shows when the values are large. "
     "For float32 inputs, pass p.to(v.dtype) and v as they are: the dot then runs in float32 "
     "(TF32 on an NVIDIA GPU, see the chapter).", {"pv16": True}),
)

def _ROUNDING(dtype: torch.dtype) -> tuple[float, float]:
    """Float16 accumulation and float16 P·V *are* rounding: the simulation rounds where the
    learner's kernel does, but not in the same order (it rounds what enters the product, not the
    running sum ℓ), so the two agree within float16's own precision, ten times the exercise's
    float32 tolerance, not within twice it."""
    return (1e-3, 1e-2)


_ONE_AHEAD = ("Your causal mask lets query i see key i + 1, one step into the future. Keep key j "
              "for query i only when j <= i: keys[None, :] <= rows[:, None].")

TRITON_FLASH_FORWARD = Exercise(
    id="triton_flash_forward",
    chapter=CHAPTER,
    time_limit=TIME_LIMITS["triton_flash_forward"],
    extension=_launch_check("out", "lse"),
    time_limit_note=_time_note(TIME_LIMITS["triton_flash_forward"]),
    allowed_course_calls=(CHECKING, HOST_RULE),
    title="The FlashAttention-2 forward kernel",
    signature=("triton_flash_forward(q, k, v (B, H, L, E) float32, is_causal=False) "
               "-> (out, lse (B, H, L))"),
    params=("q", "k", "v", "is_causal"),
    output_names=("out", "lse"),
    cases=_flash_cases,
    oracle=_flash_oracle,
    solution=triton_flash_forward,
    forbidden=("sdpa", "matmul", "softmax"),
    tolerances={torch.float32: (1e-4, 1e-3)},
    hints=(
        "Grid (cdiv(L, BLOCK_M), B·H): program (i, bh) loads its BLOCK_M queries once, then walks "
        "the key blocks, keeping per query row a running max m, sum ℓ and accumulator O "
        "(tl.full / tl.zeros in float32). The head starts at bh·L·E for contiguous tensors.",
        "Work in base 2: multiply the scores by qk_scale = log2(e)/√E and use tl.exp2 everywhere "
        "(α = exp2(m - m_new), p = exp2(s - m_new)). Mask the ragged last key block "
        "(keys < S: on the loads, and -inf on the scores) and the stores (rows < L). When "
        "causal, visit key blocks below the diagonal without a mask, then the diagonal block "
        "with keys[None, :] <= rows[:, None]. At the end: out = O/ℓ, lse = (m + log2 ℓ)·ln 2.",
        "for start in range(lo, hi, BLOCK_N): keys = start + tl.arange(0, BLOCK_N); "
        "k = tl.load(..., mask=(keys < S)[:, None], other=0.0); v likewise; "
        "s = tl.dot(q, tl.trans(k)) * qk_scale; s = tl.where(keep, s, float('-inf')); "
        "m_new = tl.maximum(m, tl.max(s, axis=1)); alpha = tl.exp2(m - m_new); "
        "p = tl.exp2(s - m_new[:, None]); ell = alpha * ell + tl.sum(p, axis=1); "
        "acc = acc * alpha[:, None] + tl.dot(p, v); m = m_new",
    ),
    mistakes=(
        Mistake("lse_not_written", "Your out is right but lse is all zeros: the kernel never "
                "stores it. Store lse = (m + tl.log2(ell)) · ln 2 at lse_ptr + bh·L + rows "
                "(masked with rows < L).", _sim(lse_zero=True)),
        Mistake("lse_base_2", "Your lse is in base 2: m + log2(ℓ) measures the scores in units "
                "of log2(e)·s/√E. Multiply by ln 2 (0.6931...) to get the natural log-sum-exp "
                "the backward pass expects.", _sim(lse_scale=1.0)),
        Mistake("log2e_missing", "Your kernel uses tl.exp2 but did not fold log2(e) into the "
                "scale, so it computes 2^(s/√E) instead of e^(s/√E): multiply the scale by "
                "log2(e) = 1.4427... (qk_scale = log2(e)/√E).", _sim(factor=1.0)),
        Mistake("log2e_twice", "log2(e) enters your scores twice (the scale already holds it "
                "and you multiplied again), so the softmax is too sharp: fold it in once, "
                "qk_scale = log2(e)/√E.", _sim(factor=LOG2E * LOG2E)),
        Mistake("exp_instead_of_exp2", "Your scores are multiplied by log2(e) but exponentiated "
                "with tl.exp: either use tl.exp2 (the point of folding log2(e) into the scale), or "
                "drop the log2(e) factor.", _sim(base=math.e)),
        Mistake("no_running_max", "Your kernel exponentiates the raw scores (no running "
                "maximum is subtracted): with scores in the hundreds exp2 overflows float32 to "
                "inf, and inf / inf is NaN. Keep a running maximum m per row and use "
                "p = tl.exp2(s - m_new[:, None]), rescaling ℓ and O by α = exp2(m - m_new) when "
                "it grows.", _sim(no_max=True)),
        Mistake("causal_excludes_diagonal", "Your causal mask also hides the diagonal (key i "
                "from query i), so query 0 sees no key at all (NaN). Keep key j for query i when "
                "j <= i: keys[None, :] <= rows[:, None].", _sim(diag=-1)),
        Mistake("causal_one_ahead", _ONE_AHEAD, _sim(diag=1)),
        Mistake("missing_final_division", "Your out is O, not O / ℓ: after the last key block "
                "divide the accumulator by the running sum, out = acc / ell[:, None] (the "
                "weights sum to 1 only then).", _sim(undivided=True)),
        Mistake("lse_missing_max", "Your lse is log ℓ only: ℓ sums exp(s − m), relative to the "
                "running maximum m, so the log-sum-exp is m + log ℓ (in base 2: "
                "(m + log2 ℓ)·ln 2). Add m back.", _sim(lse_no_max=True)),
        *(Mistake(f"diagonal_tile_skipped_block{b}", "Your causal kernel visits the key blocks "
                  "before the query block but never the diagonal tile itself, so query i misses "
                  "the keys of its own block, itself included (and the first block's queries see "
                  "no key at all: NaN). Visit the diagonal tile too, with the mask "
                  "keys[None, :] <= rows[:, None] (the loop's end is (block + 1)·BLOCK_M).",
                  _sim(block=b, skip_diagonal=True), family="diagonal_tile_skipped")
          for b in BLOCKS),
        *(Mistake(f"causal_one_ahead_block{b}", _ONE_AHEAD, _sim(diag=1, leak_block=b),
                  family="causal_one_ahead") for b in BLOCKS),
        *(Mistake(f"{name}_block{b}", message, _sim(block=b, **options),
                  tolerance=_ROUNDING if ("acc16" in options or "pv16" in options) else None,
                  family=name)
          for name, message, options in _BLOCK_MISTAKES for b in BLOCKS),
    ),
)

# --------------------------------------------------------------------------- the backward pass


def _bwd_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    def case(b: int, h: int, n: int, e: int, causal: bool, offset=None) -> tuple:
        q, k, v, dout = r(b, h, n, e), r(b, h, n, e), r(b, h, n, e), r(b, h, n, e)
        if offset is not None:
            # Every score of query row i gets the same offset c_i in [lo, hi): a key component
            # that is 1 for all keys, times c_i·√E in the queries. The softmax does not change,
            # but exp (or exp2) of any score overflows float32. A float32 kernel's P is then
            # only good to about 1e-4 (its scores are rounded near c_i) and dK's terms carry the
            # large query component: a small dO keeps that rounding below the tolerances, while
            # each known mistake is still far outside them.
            lo, hi = offset
            k[..., 0] = 1.0
            q[..., 0] = math.sqrt(e) * (lo + (hi - lo) * torch.rand(b, h, n, generator=gen))
            dout = 1e-3 * dout
        out, lse = _flash_oracle(q, k, v, causal)
        return q, k, v, out, lse, dout, causal

    return [
        Case("L = 40 (not a multiple of the block)", case(1, 2, 40, 16, False)),
        Case("L = 40, causal", case(1, 2, 40, 16, True)),
        Case("L = 5 (smaller than a block), causal", case(1, 1, 5, 16, True)),
        Case("L = 7, causal, two batches", case(2, 1, 7, 16, True)),
        Case("E = 32, causal", case(1, 1, 33, 32, True)),
        Case("L = 100, causal", case(1, 1, 100, 16, True),
             note="no N×N tensor, N = 100: none with two dims >= 100, or as many elements",
             max_square=100),
        Case("scores in the hundreds", case(1, 2, 24, 16, False, offset=(330.0, 370.0)),
             note="every score between about 320 and 380: exp2 of a score overflows float32, "
                  "exp2 of a score minus the saved lse does not"),
    ]


def _bwd_magnitude(q, k, v, out, lse, dout, is_causal=False):
    """The size of the terms each gradient entry sums: |dS| |K| / √E, |dS|ᵀ |Q| / √E and
    Pᵀ |dO|. Where they cancel (a key component shared by every key gives dQ a zero there, from
    terms in the hundreds), a float32 kernel's rounding is relative to them, not to the
    gradient. Only the case with scores in the hundreds has such terms: with every |lse| below
    50 the gradient's own size is the scale (``None``, no L×S product). Computed by the engine,
    outside the learner's call: matrix products are fine."""
    if float(lse.detach().abs().amax()) < 50:
        return None
    qd, kd, vd, od, dod = (t.detach().double() for t in (q, k, v, out, dout))
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = torch.exp(_scores(q, k, is_causal) - lse.detach().double()[..., None])
    ds = (p * (dod @ vd.transpose(-2, -1) - (dod * od).sum(-1, keepdim=True))).abs()
    return (scale * ds @ kd.abs(), scale * ds.transpose(-2, -1) @ qd.abs(),
            p.transpose(-2, -1) @ dod.abs())


def _bwd_sim(q, k, v, out, lse, dout, is_causal=False, *, d_term=True, ds_factor=1.0,
             lse_base2=False, diag=0, dk_unscaled=False, p32=False, exp_split=False,
             leak_block=None, dv_from_ds=False):
    """Float64 gradients of attention from the saved ``out`` and ``lse``, as a (possibly buggy)
    kernel computes them; ``SIM_ROWS`` rows at a time with element-wise products (no L×S matrix,
    no matrix product).

    ``d_term=False``: dS = P ∘ dP (D forgotten); ``ds_factor``: dS scaled by it; ``lse_base2``:
    P = exp2(S·log2 e − lse) with the natural lse; ``diag``: key j kept for query i when
    j ≤ i + diag; ``ds_factor=None``: dQ, dK without the 1/√E;
    ``dk_unscaled``: dK and dV from P recomputed with unscaled scores Q Kᵀ; ``p32``: P rounded to
    float32, as a kernel holds it (where it overflows, inf: the mistakes' simulations);
    ``exp_split``: P = exp(S) / exp(lse) in float32; ``leak_block`` (with ``diag=1``): key i + 1
    visible to query i only inside a tile of that many rows (tiles above the diagonal skipped);
    ``dv_from_ds``: dV = dSᵀ dO."""
    qd, kd, vd, od, dod = (t.double() for t in (q, k, v, out, dout))
    lse_d = lse.double()
    scale = 1.0 / math.sqrt(q.shape[-1])
    ds_factor = math.sqrt(q.shape[-1]) if ds_factor is None else ds_factor   # no 1/√E at all
    delta = (dod * od).sum(-1)                                   # D = rowsum(dO ∘ O)
    dq, dk, dv = torch.zeros_like(qd), torch.zeros_like(kd), torch.zeros_like(vd)
    n_keys = k.shape[-2]
    for r0 in range(0, q.shape[-2], SIM_ROWS):
        r1 = min(r0 + SIM_ROWS, q.shape[-2])
        qr, dor = qd[..., r0:r1, :], dod[..., r0:r1, :]
        lr, dr = lse_d[..., r0:r1], delta[..., r0:r1]
        raw = (qr[..., :, None, :] * kd[..., None, :, :]).sum(-1)       # (.., rows, S)
        keep = torch.ones(r1 - r0, n_keys, dtype=torch.bool)
        if is_causal:
            i, j = torch.arange(r0, r1)[:, None], torch.arange(n_keys)[None, :]
            keep = j <= i + diag
            if leak_block is not None:   # key i + 1 lies in the next tile, never visited
                keep = keep & ~((j == i + 1) & ((i + 1) % leak_block == 0))

        def probs(s, lr=lr, keep=keep):
            if exp_split:
                p = (torch.exp(s.float()) / torch.exp(lr.float()[..., None])).double()
            elif lse_base2:
                p = 2.0 ** (s * LOG2E - lr[..., None])
            else:
                p = torch.exp(s - lr[..., None])
            if p32:
                p = p.float().double()
            return p.masked_fill(~keep, 0.0)

        p = probs(raw * scale)
        dp = (dor[..., :, None, :] * vd[..., None, :, :]).sum(-1)
        ds = p * (dp - dr[..., None]) if d_term else p * dp
        dq[..., r0:r1, :] = (ds[..., :, :, None] * kd[..., None, :, :]).sum(-2) * scale * ds_factor
        if dk_unscaled:
            p = probs(raw)
            ds = p * (dp - dr[..., None]) if d_term else p * dp
        dv += ((ds if dv_from_ds else p)[..., :, :, None] * dor[..., :, None, :]).sum(-3)
        dk += (ds[..., :, :, None] * qr[..., :, None, :]).sum(-3) * scale * ds_factor
    return tuple(t.to(q.dtype) for t in (dq, dk, dv))


def _bwd_oracle(q, k, v, out, lse, dout, is_causal=False):
    return _bwd_sim(q, k, v, out, lse, dout, is_causal)


def triton_flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                          lse: torch.Tensor, dout: torch.Tensor, is_causal: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass: ``(dq, dk, dv)`` from Triton kernels (dK, dV per key block, then dQ per
    query block, no atomics), P recomputed from lse."""
    B, H, L, E = q.shape
    S = k.shape[-2]
    q, k, v, out, dout = (t.contiguous() for t in (q, k, v, out, dout))
    delta = torch.empty((B, H, L), dtype=torch.float32, device=q.device)  # D = rowsum(dO ∘ O)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(E)
    flash_bwd_delta_kernel[(triton.cdiv(L, 32), B * H)](out, dout, delta, L, BLOCK_M=32, E=E)
    flash_bwd_dkdv_kernel[(triton.cdiv(S, 32), B * H)](          # one program per key block
        q, k, v, dout, lse.contiguous(), delta, dk, dv, L, S, scale, IS_CAUSAL=is_causal,
        BLOCK_M=32, BLOCK_N=32, E=E)
    flash_bwd_dq_kernel[(triton.cdiv(L, 32), B * H)](            # one program per query block
        q, k, v, dout, lse.contiguous(), delta, dq, L, S, scale, IS_CAUSAL=is_causal,
        BLOCK_M=32, BLOCK_N=32, E=E)
    return dq, dk, dv


def _bwd(**options):
    """A mistake's simulation: P rounded to float32 as the learner's kernel holds it."""
    return lambda q, k, v, out, lse, dout, is_causal=False: _bwd_sim(q, k, v, out, lse, dout,
                                                                     is_causal, p32=True,
                                                                     **options)


def _UNSCALED(dtype: torch.dtype) -> tuple[float, float]:
    """dK and dV from unscaled scores: P up to e^(√E·s − lse), terms near 1e6 that cancel, so a
    float32 kernel and the float64 simulation differ by float32 rounding of those terms (up to
    about 1e-6 of them), not by twice the exercise's tolerance of the (small) result."""
    return (1e-1, 2e-2)


_ONE_AHEAD_BWD = ("Your backward causal mask lets query i see key i + 1: keep key j for query i "
                  "only when j <= i (the forward's mask).")

TRITON_FLASH_BACKWARD = Exercise(
    id="triton_flash_backward",
    chapter=CHAPTER,
    time_limit=TIME_LIMITS["triton_flash_backward"],
    extension=_launch_check("dq", "dk", "dv"),
    time_limit_note=_time_note(TIME_LIMITS["triton_flash_backward"]),
    allowed_course_calls=(CHECKING, HOST_RULE),
    title="The backward kernels: dK and dV per key block, dQ per query block",
    signature=("triton_flash_backward(q, k, v, out, dout (B, H, L, E) float32, lse (B, H, L), "
               "is_causal=False) -> (dq, dk, dv)"),
    params=("q", "k", "v", "out", "lse", "dout", "is_causal"),
    output_names=("dq", "dk", "dv"),
    cases=_bwd_cases,
    oracle=_bwd_oracle,
    magnitude=_bwd_magnitude,
    solution=triton_flash_backward,
    forbidden=("sdpa", "matmul", "softmax", "autograd"),
    tolerances={torch.float32: (1e-4, 1e-3)},
    hints=(
        "Three launches: D = rowsum(dO ∘ O) per row (a small kernel); then one program per "
        "(key block, batch·head) that walks the query blocks and accumulates dK and dV; then one "
        "program per (query block, batch·head) that walks the key blocks and accumulates dQ. "
        "Each program owns its output block, so no two programs write the same element.",
        "In both loops recompute the tile's probabilities from the saved lse: "
        "P = exp2(s·log2(e)/√E − lse·log2(e)), zero where the key is masked (keys ≥ S, or "
        "j > i when causal). Then dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dK += dSᵀ Q, "
        "dQ += dS K, and multiply dK and dQ by 1/√E once at the end.",
        "s = tl.dot(q, tl.trans(k)) * qk_scale; p = tl.where(keep, tl.exp2(s - lse[:, None] * "
        "LOG2E), 0.0); dv += tl.dot(tl.trans(p), do); dp = tl.dot(do, tl.trans(v)); "
        "ds = p * (dp - delta[:, None]); dk += tl.dot(tl.trans(ds), q); in the dQ kernel "
        "dq += tl.dot(ds, k); store dk * sm_scale and dq * sm_scale.",
    ),
    mistakes=(
        Mistake("d_term_forgotten", "Your dS leaves out the D term: dS = P ∘ (dP − D) with "
                "D = rowsum(dO ∘ O) per query row (it is rowsum(P ∘ dP), the softmax Jacobian's "
                "second part). Compute D first (a small kernel over O and dO) and subtract it.",
                _bwd(d_term=False)),
        Mistake("ds_scale_log2e", "Your dQ and dK are log2(e) = 1.44 times too large: you "
                "scaled dS by qk_scale = log2(e)/√E (the forward's base-2 scale) instead of "
                "sm_scale = 1/√E. The exp2 trick changes how P is computed, not the gradient.",
                _bwd(ds_factor=LOG2E)),
        Mistake("ds_scale_missing", "Your dQ and dK are √E times too large: S = Q Kᵀ/√E, so "
                "dQ = dS K/√E and dK = dSᵀ Q/√E. Multiply both by sm_scale = 1/√E.",
                _bwd(ds_factor=None)),
        Mistake("lse_base_e_in_exp2", "You recompute P with tl.exp2 but subtract the natural "
                "lse: in base 2 it is lse·log2(e). P = exp2(s·log2(e)/√E − lse·log2(e)) "
                "(or tl.exp(s/√E − lse)).", _bwd(lse_base2=True)),
        Mistake("causal_one_ahead_bwd", _ONE_AHEAD_BWD, _bwd(diag=1)),
        Mistake("causal_excludes_diagonal_bwd", "Your backward causal mask hides the diagonal "
                "(key i from query i): keep key j for query i when j <= i (the forward's mask).",
                _bwd(diag=-1)),
        Mistake("dk_from_unscaled_scores", "Your dK and dV use probabilities recomputed from "
                "unscaled scores Q Kᵀ (dQ is right): multiply the scores by 1/√E (times log2(e) "
                "for exp2) in the dK/dV kernel too, before subtracting lse.",
                _bwd(dk_unscaled=True), tolerance=_UNSCALED),
        *(Mistake(f"causal_one_ahead_bwd_block{b}", _ONE_AHEAD_BWD,
                  _bwd(diag=1, leak_block=b), family="causal_one_ahead_bwd") for b in BLOCKS),
        Mistake("exp_then_divide", "You compute P as exp2(s·log2 e) / exp2(lse·log2 e) (or "
                "exp(S)·exp(−lse)): equal to exp2((s − lse)·log2 e) on paper, but with scores in "
                "the hundreds the numerator overflows float32 to inf (and exp(−lse) underflows "
                "to 0), so P is NaN. Subtract inside one exponential: "
                "p = tl.exp2(s·log2(e)/√E − lse·log2(e)); the saved lse plays the part of the "
                "running maximum.", _bwd(exp_split=True)),
        Mistake("dv_from_ds", "Your dV sums dSᵀ dO: it is dV = Pᵀ dO, the probabilities "
                "themselves (dS = P ∘ (dP − D) is the gradient of the scores, for dQ and dK).",
                _bwd(dv_from_ds=True)),
    ),
)
