"""Benchmark of chapter 10: greedy decoding tokens/s with and without a KV cache, on CPU.

    python -m course_lib.chapters.ch10_inference.bench [--out PATH] [--lengths 32 64 128 256 512]

For each generated length the tiny GPT of :mod:`.helpers` decodes from an 8-token prompt both
ways (tokens checked identical), timed with the toolkit's ``best_time`` on the process's CPU
clock with one torch thread (stable on a shared machine). Writes a JSON file that the chapter
renders; the committed one is ``data/decode-cpu.json``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from course_lib.toolkit.bench import script
from course_lib.toolkit.bench.machine import machine_info
from course_lib.toolkit.bench.timing import best_time, torch_threads

from . import helpers

DEFAULT_LENGTHS = (32, 64, 128, 256, 512)
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / helpers.RESULTS


def run(lengths=DEFAULT_LENGTHS, repeats: int = 3, prompt_len: int = 8, seed: int = 0
        ) -> dict:
    model = helpers.TinyGPT(seed=seed)
    prompt = torch.randint(0, model.vocab, (1, prompt_len),
                           generator=torch.Generator().manual_seed(seed + 1))
    results = []
    with torch_threads(1):
        for n in lengths:
            plain = helpers.generate_uncached(model, prompt, n)
            cached = helpers.generate_cached(model, prompt, n)
            if not torch.equal(plain.tokens, cached.tokens):
                raise AssertionError(f"cached and uncached tokens differ at n={n}")
            t_plain = best_time(lambda n=n: helpers.generate_uncached(model, prompt, n),
                                repeats=repeats, clock="cpu")[0]
            t_cached = best_time(lambda n=n: helpers.generate_cached(model, prompt, n),
                                 repeats=repeats, clock="cpu")[0]
            cache_bytes = sum(c.nbytes for c in cached.caches)
            results.append({"n_new": n, "prompt": prompt_len,
                            "seconds_uncached": t_plain, "seconds_cached": t_cached,
                            "tokens_per_s_uncached": n / t_plain,
                            "tokens_per_s_cached": n / t_cached,
                            "cache_bytes": cache_bytes, "cached_tokens": len(cached.caches[0])})
            print(f"n={n:4d}: {n / t_plain:8.1f} tok/s without cache, {n / t_cached:8.1f} "
                  f"with ({t_plain / t_cached:.1f}x); cache {cache_bytes / 1024:.0f} KiB")
    info = machine_info("cpu")
    info["threads"] = 1
    return {"model": {"vocab": model.vocab, "dim": model.dim, "heads": model.heads,
                      "layers": model.layers, "dtype": "float32", "seed": seed},
            "clock": "cpu (process user+system seconds), best of "
                     f"{repeats}, 1 torch thread",
            "machine": info, "results": results}


def main(argv=None) -> None:
    script.run_and_write(run, __doc__, DEFAULT_OUT, DEFAULT_LENGTHS, argv)


if __name__ == "__main__":
    main()
