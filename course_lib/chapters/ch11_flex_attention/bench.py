"""Benchmark of chapter 11: eager flex, compiled flex and SDPA with a dense mask, on CPU.

    python -m course_lib.chapters.ch11_flex_attention.bench [--out PATH] [--lengths 2048]
                                                           [--device cpu|cuda]

For each mask (causal, documents, sliding window) and length ``L = S``: one ``(1, H, L, E)``
float32 problem; ``torch.compile(flex_attention)`` is called once and that first call's wall time
is recorded as the *compile time* (it traces the mods, generates and builds a C++ kernel); then
eager ``flex_attention``, the compiled one, and ``F.scaled_dot_product_attention`` with the same
mask as a dense bool ``(L, S)`` tensor are timed with the toolkit's ``best_time`` on the process's
CPU clock, one torch thread (stable on a shared machine). All three outputs are checked against
each other before timing. Writes a JSON file that the chapter renders; the committed one is
``data/flex-cpu.json``. ``--device cuda``: ``(4, 16, L, E)`` bfloat16 problems, wall time with
the device synchronised, written to ``data/flex-cuda.json``.
"""

from __future__ import annotations

import functools
import resource
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

from course_lib.toolkit.bench import script
from course_lib.toolkit.bench.machine import machine_info
from course_lib.toolkit.bench.timing import best_time, calls_per_sample, time_call, torch_threads

from . import helpers

DEFAULT_LENGTHS = (2048,)
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / helpers.BENCH_RESULTS
BLOCK = 128      # flex's default tile on CPU and GPU


def mask_mods(L: int, device: str = "cpu") -> dict[str, helpers.MaskMod]:
    """The benchmarked masks for ``L = S``: causal, 4 documents of L/4, a window of L/8; the
    document ids live on ``device`` (a mask mod indexes them with the kernel's indices)."""
    return {
        "causal": helpers.causal_mod(L, L),
        "documents (4)": helpers.document_mod(helpers.document_ids([L // 4] * 4).to(device)),
        "sliding window (L/8)": helpers.sliding_window_mod(L, L, L // 8),
    }


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _timer(device: str, repeats: int):
    """Seconds per call: CPU, best of ``repeats`` on the process's CPU clock (one thread); CUDA,
    best of ``repeats`` samples of wall time with the device synchronised (enough back-to-back
    calls per sample to last 50 ms)."""
    if device == "cpu":
        return lambda call: best_time(call, repeats=repeats, clock="cpu")[0]

    def cuda_seconds(call) -> float:
        call()
        number = calls_per_sample(time_call(call, device), 0.05)
        return min(time_call(call, device, number) for _ in range(repeats))
    return cuda_seconds


def run(lengths=DEFAULT_LENGTHS, repeats: int = 3, H: int | None = None, E: int = 64,
        seed: int = 0, device: str = "cpu") -> dict:
    """CPU: ``(1, 4, L, E)`` float32, one torch thread. CUDA: ``(4, 16, L, E)`` bfloat16."""
    on_cuda = torch.device(device).type == "cuda"
    batch, dtype = (4, torch.bfloat16) if on_cuda else (1, torch.float32)
    H = (16 if on_cuda else 4) if H is None else H
    tolerance = 2e-2 if on_cuda else 1e-4
    seconds = _timer(device, repeats)
    results = []
    with torch_threads(None if on_cuda else 1):
        for L in lengths:
            g = torch.Generator().manual_seed(seed)
            q, k, v = (torch.randn(batch, H, L, E, generator=g).to(device, dtype)
                       for _ in range(3))
            for name, mod in mask_mods(L, device).items():
                bm = create_block_mask(mod, None, None, L, L, device=device, BLOCK_SIZE=BLOCK)
                dense = create_mask(mod, None, None, L, L, device=device)[0, 0]
                compiled = torch.compile(flex_attention, dynamic=False)
                torch._dynamo.reset()                      # a cold compile for every row
                t0, c0 = time.perf_counter(), _cpu_seconds()
                out_c = compiled(q, k, v, block_mask=bm)
                if on_cuda:
                    torch.cuda.synchronize()
                compile_s, compile_cpu = time.perf_counter() - t0, _cpu_seconds() - c0
                out_e = flex_attention(q, k, v, block_mask=bm)
                out_s = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
                err_e = float((out_e - out_s).abs().max())
                err_c = float((out_c - out_s).abs().max())
                if max(err_e, err_c) > tolerance:
                    raise AssertionError(f"{name}, L={L}: flex differs from SDPA by "
                                         f"{max(err_e, err_c):.2e}")
                calls = {
                    "eager": functools.partial(flex_attention, q, k, v, block_mask=bm),
                    "compiled": functools.partial(compiled, q, k, v, block_mask=bm),
                    "sdpa": functools.partial(F.scaled_dot_product_attention, q, k, v,
                                              attn_mask=dense),
                }
                t_e, t_c, t_s = (seconds(calls[c]) for c in ("eager", "compiled", "sdpa"))
                tiles = helpers.tile_counts(bm)
                row = {"mask": name, "L": L, "H": H, "E": E,
                       "tiles_skipped_fraction": tiles.skipped_fraction,
                       "seconds_flex_eager": t_e, "seconds_flex_compiled": t_c,
                       "seconds_sdpa_dense": t_s, "compile_seconds_wall": compile_s,
                       "compile_seconds_cpu": compile_cpu,
                       "max_abs_diff_eager": err_e, "max_abs_diff_compiled": err_c}
                results.append(row)
                print(f"{name:22s} L={L:5d}: eager {1e3 * t_e:8.2f} ms, compiled "
                      f"{1e3 * t_c:8.2f} ms, sdpa dense {1e3 * t_s:8.2f} ms, "
                      f"compile {compile_s:5.1f} s wall, {compile_cpu:5.1f} s CPU", flush=True)
    info = machine_info(device)
    if not on_cuda:
        info["threads"] = 1
    clock = (f"cpu (process user+system seconds), best of {repeats}, 1 torch thread"
             if not on_cuda else f"wall, CUDA synchronised, best of {repeats} samples of "
                                 "back-to-back calls lasting >= 50 ms")
    return {"torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."),
            "batch": batch, "block": BLOCK, "device": device,
            "clock": clock + "; compile: the first compiled call, wall seconds and CPU seconds "
                             "of this process and its children (the compiler's workers)",
            "machine": info, "results": results}


def default_out(device: str) -> Path:
    """``data/flex-cpu.json`` or ``data/flex-cuda.json``."""
    return DEFAULT_OUT.with_name(f"flex-{torch.device(device).type}.json")


def main(argv=None) -> None:
    script.run_and_write(run, __doc__, default_out, DEFAULT_LENGTHS, argv,
                         devices=("cpu", "cuda"))


if __name__ == "__main__":
    main()
