"""Chapter 9's kernels compiled for a GPU: checked against torch, timed against torch's backends.

    python -m course_lib.chapters.ch09_flash_triton.bench [--out PATH] [--lengths 1024 ... 16384]

Needs a CUDA device (the interpreter runs the same kernels on a CPU, but times nothing useful).
``(B, H, L, E) = (4, 16, L, E)`` bfloat16 inputs, E = 64 and 128, causal and not:

1. *checked*: the course's forward (``kernels.flash_forward``: out and log-sum-exp) and backward
   (``kernels.flash_backward``: dQ, dK, dV) against torch's attention computed in float32 from
   the same bf16 inputs; torch's own bf16 kernels are measured against the same reference, so
   the table shows what bf16 costs anyone;
2. *tuned*: a few launch settings (query block, key block, warps, pipeline stages) timed at
   L = 8192; the fastest per E is used from then on (the chapter's 32 × 32 tiles suit the
   interpreter, not a GPU);
3. *timed*: forward, and forward + backward, of the course's kernels and of
   ``F.scaled_dot_product_attention`` restricted to one backend at a time (``flash``,
   ``cudnn``, ``efficient``), each with ``triton.testing.do_bench`` (median), next to the bf16
   matmul rate measured in the same run.

Writes ``data/triton-cuda.json``, which chapter 9 renders.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from course_lib.toolkit.bench import script
from course_lib.toolkit.bench.flops import attention_flops
from course_lib.toolkit.bench.machine import machine_info
from course_lib.toolkit.bench.matmul import matmul_rate
from course_lib.toolkit.bench.workloads import seeded_randn

from . import kernels

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "triton-cuda.json"
BATCH, HEADS, DIMS = 4, 16, (64, 128)
Config = tuple[int, int, "int | None", "int | None"]   # block_m, block_n, num_warps, num_stages
TUNE_AT = 8192
#: (block_m, block_n, num_warps, num_stages) tried at L = TUNE_AT; block_m a multiple of block_n
CONFIGS = ((32, 32, 4, 2), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 32, 4, 3),
           (128, 128, 8, 2))
#: (block_m, block_n, num_warps, num_stages) tried for the backward (after the best forward)
BWD_CONFIGS = ((32, 32, 4, 2), (64, 32, 4, 2), (64, 64, 4, 2), (128, 64, 8, 2))
#: torch's SDPA backends compared with the course's kernel
BACKENDS = ("flash", "cudnn", "efficient")


def _backend(name: str):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def torch_attention(backend: str) -> Callable[..., torch.Tensor]:
    """``F.scaled_dot_product_attention`` restricted to ``backend`` (raises if it cannot run)."""
    from torch.nn.attention import sdpa_kernel

    def attend(q, k, v, is_causal=False):
        with sdpa_kernel([_backend(backend)]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    return attend


def inputs(L: int, E: int, dtype: torch.dtype, device: str, seed: int = 0,
           batch: int = BATCH, heads: int = HEADS) -> tuple[torch.Tensor, ...]:
    """Seeded standard-normal ``q, k, v, dO`` of shape ``(batch, heads, L, E)``, drawn on
    ``device``."""
    return tuple(x.to(dtype) for x in seeded_randn(4, (batch, heads, L, E), device, seed))


def errors_vs_float32(L: int, E: int, causal: bool, dtype: torch.dtype = torch.bfloat16,
                      device: str = "cuda", config: Config = (32, 32, None, None),
                      bwd_config: Config | None = None, backends: tuple[str, ...] = (),
                      batch: int = BATCH, heads: int = HEADS) -> dict[str, dict[str, float]]:
    """Max absolute errors against float32 attention on the same (rounded) inputs:
    ``{"triton": {"out", "lse", "dq", "dk", "dv"}, <backend>: {"out", "dq", "dk", "dv"}}``."""
    q, k, v, do = inputs(L, E, dtype, device, batch=batch, heads=heads)
    q32, k32, v32 = (t.detach().float().clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal)
    ref.backward(do.float())
    scores = (q32 @ k32.transpose(-2, -1)).detach() / math.sqrt(E)
    if causal:
        scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool, device=device).triu(1),
                                    float("-inf"))
    ref_lse = torch.logsumexp(scores, dim=-1)
    out, lse = kernels.flash_forward(q, k, v, causal, *config)
    dq, dk, dv = kernels.flash_backward(q, k, v, out, lse, do, causal, *(bwd_config or config))

    def err(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.detach().float() - b.detach().float()).abs().max())

    found = {"triton": {"out": err(out, ref), "lse": err(lse, ref_lse), "dq": err(dq, q32.grad),
                        "dk": err(dk, k32.grad), "dv": err(dv, v32.grad)}}
    for name in backends:
        qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
        try:
            o = torch_attention(name)(qb, kb, vb, is_causal=causal)
            o.backward(do)
        except RuntimeError as e:
            found[name] = {"unavailable": str(e).splitlines()[0][:200]}
            continue
        found[name] = {"out": err(o, ref), "dq": err(qb.grad, q32.grad),
                       "dk": err(kb.grad, k32.grad), "dv": err(vb.grad, v32.grad)}
    return found


def _median_ms(fn: Callable[[], object]) -> float:
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def _timed(fn: Callable[[], object]) -> dict[str, Any]:
    """``{"ms": median}`` or ``{"error": why}`` (a backend that refuses, a config that does not
    fit the chip's shared memory)."""
    try:
        fn()
        torch.cuda.synchronize()
        return {"ms": _median_ms(fn)}
    except Exception as e:  # recorded, not hidden: the table shows it
        torch.cuda.synchronize()
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}


def _course_calls(q, k, v, do, causal: bool, config: Config, bwd_config: Config
                  ) -> tuple[Callable, Callable]:
    def fwd():
        return kernels.flash_forward(q, k, v, causal, *config)

    def fwd_bwd():
        out, lse = fwd()
        return kernels.flash_backward(q, k, v, out, lse, do, causal, *bwd_config)
    return fwd, fwd_bwd


def _torch_calls(q, k, v, do, causal: bool, backend: str) -> tuple[Callable, Callable]:
    attend = torch_attention(backend)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def fwd():
        with torch.no_grad():
            return attend(q, k, v, is_causal=causal)

    def fwd_bwd():
        for t in (qg, kg, vg):
            t.grad = None
        attend(qg, kg, vg, is_causal=causal).backward(do)
    return fwd, fwd_bwd


def run(lengths=DEFAULT_LENGTHS, repeats: int = 3, device: str = "cuda") -> dict[str, Any]:
    """Check, tune and time (module docstring); ``repeats`` is unused (do_bench decides)."""
    if not torch.cuda.is_available() or kernels_interpreted():
        raise SystemExit("needs a CUDA device and compiled Triton (TRITON_INTERPRET unset)")
    dtype = torch.bfloat16
    checks = []
    for E in DIMS:
        for causal in (False, True):
            found = errors_vs_float32(1024, E, causal, dtype, device, backends=BACKENDS)
            checks.append({"L": 1024, "E": E, "causal": causal, "errors": found})
            print("check", E, causal, found, flush=True)
    tuning, best, best_bwd = [], {}, {}
    for E in DIMS:
        q, k, v, do = inputs(TUNE_AT, E, dtype, device)
        for config in CONFIGS:
            fwd, _ = _course_calls(q, k, v, do, False, config, config)
            t = _timed(fwd)
            tuning.append({"E": E, "L": TUNE_AT, "pass": "forward", "config": list(config), **t})
            print("tune", E, config, t, flush=True)
        best[E] = _fastest(tuning, E, "forward", CONFIGS[0])
        for config in BWD_CONFIGS:
            _, fwd_bwd = _course_calls(q, k, v, do, False, best[E], config)
            t = _timed(fwd_bwd)
            tuning.append({"E": E, "L": TUNE_AT, "pass": "forward+backward",
                           "config": list(config), **t})
            print("tune bwd", E, config, t, flush=True)
        best_bwd[E] = _fastest(tuning, E, "forward+backward", BWD_CONFIGS[0])
        del q, k, v, do
    checks_tuned = []
    for E in DIMS:
        for causal in (False, True):
            found = errors_vs_float32(1000, E, causal, dtype, device, config=best[E],
                                      bwd_config=best_bwd[E])
            checks_tuned.append({"L": 1000, "E": E, "causal": causal, "config": list(best[E]),
                                 "bwd_config": list(best_bwd[E]), "errors": found["triton"]})
    rows = []
    for L in lengths:
        for E in DIMS:
            q, k, v, do = inputs(L, E, dtype, device)
            for causal in (False, True):
                calls = {"triton": _course_calls(q, k, v, do, causal, best[E], best_bwd[E])}
                calls.update({b: _torch_calls(q, k, v, do, causal, b) for b in BACKENDS})
                for impl, (fwd, fwd_bwd) in calls.items():
                    for backward, fn in ((False, fwd), (True, fwd_bwd)):
                        t = _timed(fn)
                        row = {"impl": impl, "L": L, "E": E, "causal": causal,
                               "backward": backward,
                               "flops": attention_flops(BATCH, HEADS, L, E, causal, backward), **t}
                        if "ms" in t:
                            row["tflops"] = row["flops"] / (t["ms"] * 1e-3) / 1e12
                        rows.append(row)
                        print(row, flush=True)
            del q, k, v, do
            torch.cuda.empty_cache()
    rate = matmul_rate(8192, "bfloat16", device, rounds=5)
    return {"schema": "course_lib.ch09.triton_cuda/1", "device": device,
            "machine": {**machine_info(device), "triton_version": _triton_version()},
            "dtype": "bfloat16", "batch": BATCH, "heads": HEADS,
            "flop_convention": "forward 4·B·H·L²·E, halved when causal; forward+backward 3.5×",
            "time_method": "triton.testing.do_bench(warmup=10 ms, rep=50 ms), median",
            "configs_tried": [list(c) for c in CONFIGS], "tuning": tuning,
            "bwd_configs_tried": [list(c) for c in BWD_CONFIGS],
            "best_config": {str(E): list(c) for E, c in best.items()},
            "best_bwd_config": {str(E): list(c) for E, c in best_bwd.items()},
            "checks": checks, "checks_tuned": checks_tuned, "rows": rows,
            "matmul_bf16": rate}


def _fastest(tuning: list[dict[str, Any]], E: int, which: str, fallback: Config) -> Config:
    ok = [r for r in tuning if r["E"] == E and r["pass"] == which and "ms" in r]
    return tuple(min(ok, key=lambda r: r["ms"])["config"]) if ok else fallback


def kernels_interpreted() -> bool:
    from . import INTERPRETED
    return INTERPRETED


def _triton_version() -> str:
    import triton
    return triton.__version__


def main(argv=None) -> None:
    script.run_and_write(run, __doc__, DEFAULT_OUT, DEFAULT_LENGTHS, argv)


if __name__ == "__main__":
    main()
