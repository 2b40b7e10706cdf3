"""What the benchmark runs: attention calls (and a plain allocation) as zero-argument closures.

A *workload factory* builds its inputs once and returns ``run()``; timing and memory measurement
only ever call ``run()``. Factories are addressed by name (``"attention"``, ``"allocate"``) so a
fresh subprocess can rebuild the very same workload (see :mod:`course_lib.toolkit.bench.memory`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
TORCH_IMPL = "torch"  # torch.nn.functional.scaled_dot_product_attention called directly


#: run only when named: ``course_lib.flash``'s tiled forward with gradients left to autograd,
#: which keeps every tile P (the contrast to the recomputing backward in training tables)
CONTRAST_IMPLS = ("flash_tile_autograd",)


def implementations(contrast: bool = False) -> dict[str, Callable[..., torch.Tensor]]:
    """``course_lib.IMPLEMENTATIONS`` plus ``"torch"`` (torch's SDPA without the course wrapper);
    ``contrast=True`` adds :data:`CONTRAST_IMPLS` (never part of a default sweep)."""
    from course_lib.attention import IMPLEMENTATIONS, flash

    fns = {**IMPLEMENTATIONS, TORCH_IMPL: F.scaled_dot_product_attention}
    if contrast:
        fns["flash_tile_autograd"] = flash.tile_autograd_attention
    return fns


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def make_inputs(batch: int, heads: int, n: int, d: int, dtype: str | torch.dtype = "float32",
                device: str = "cpu", seed: int = 0, requires_grad: bool = False):
    """Random ``q, k, v`` of shape ``(B, H, n, d)`` (standard normal, seeded; drawn on the CPU,
    or on the accelerator when ``device`` is one: drawing GiBs on one CPU thread takes seconds)."""
    out = []
    for x in seeded_randn(3, (batch, heads, n, d), device, seed):
        out.append(x.to(dtype=resolve_dtype(dtype)).requires_grad_(requires_grad))
    return tuple(out)


def seeded_randn(count: int, shape: tuple[int, ...], device: str | torch.device, seed: int
                 ) -> list[torch.Tensor]:
    """``count`` seeded standard-normal float32 tensors of ``shape``, drawn on ``device`` with
    a generator of that device (the CPU's on a CPU)."""
    where = torch.device(device)
    gen_device = "cpu" if where.type == "cpu" else where
    gen = torch.Generator(device=gen_device).manual_seed(seed)
    return [torch.randn(shape, generator=gen, device=gen_device).to(where) for _ in range(count)]


def attention(impl: str, batch: int, heads: int, n: int, d: int, causal: bool = False,
              dtype: str = "float32", device: str = "cpu", backward: bool = False,
              seed: int = 0) -> Callable[[], object]:
    """``run()`` computing ``impl``'s attention on fresh ``(B, H, n, d)`` inputs.

    ``backward=True``: ``run()`` does forward + ``out.backward(dO)`` (gradients reset each call).
    """
    fns = implementations(contrast=True)
    if impl not in fns:
        raise ValueError(f"impl must be one of {sorted(fns)}, got {impl!r}")
    fn = fns[impl]
    q, k, v = make_inputs(batch, heads, n, d, dtype, device, seed, requires_grad=backward)
    if not backward:
        def run() -> torch.Tensor:
            with torch.no_grad():
                return fn(q, k, v, is_causal=causal)
        return run
    grad_out = torch.ones_like(q)

    def run_fwd_bwd() -> torch.Tensor:
        for x in (q, k, v):
            x.grad = None
        out = fn(q, k, v, is_causal=causal)
        out.backward(grad_out)
        return out
    return run_fwd_bwd


def allocate(nbytes: int, device: str = "cpu") -> Callable[[], object]:
    """``run()`` that creates (and touches) one float32 tensor of ``nbytes`` bytes."""
    numel = max(int(nbytes) // 4, 1)

    def run() -> torch.Tensor:
        return torch.ones(numel, dtype=torch.float32, device=device)
    return run


def matmul(size: int, dtype: str = "float32", device: str = "cpu",
           seed: int = 0) -> Callable[[], object]:
    """``run()`` computing one ``(size, size) @ (size, size)`` product."""
    a, b = (x.to(dtype=resolve_dtype(dtype)) for x in seeded_randn(2, (size, size), device, seed))
    return lambda: a @ b


FACTORIES: dict[str, Callable[..., Callable[[], object]]] = {
    "attention": attention,
    "allocate": allocate,
    "matmul": matmul,
}
