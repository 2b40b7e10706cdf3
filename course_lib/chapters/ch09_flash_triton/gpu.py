"""The committed GPU run of chapter 9's kernels (``data/triton-cuda.json``, written by
``python -m course_lib.chapters.ch09_flash_triton.bench`` on a CUDA machine): read, tabulate,
compare with torch's backends. Needs no GPU and no Triton.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from course_lib.toolkit.plotting import OKABE_ITO

RESULTS = "triton-cuda.json"
#: the course's kernels, then torch's SDPA restricted to one backend each
IMPLS = ("triton", "flash", "cudnn", "efficient")
TORCH_BACKENDS = IMPLS[1:]
#: one Okabe–Ito colour per implementation (``toolkit.plotting.rate_plot`` adds a marker and a
#: dash per series, so colour is never the only cue)
COLORS = {"triton": OKABE_ITO["blue"], "flash": OKABE_ITO["orange"],
          "cudnn": OKABE_ITO["bluish green"], "efficient": OKABE_ITO["reddish purple"]}
LABELS = {"triton": "course kernels (Triton)", "flash": "torch: flash backend",
          "cudnn": "torch: cudnn backend", "efficient": "torch: efficient backend"}


def load_gpu_results(name: str = RESULTS) -> dict[str, Any]:
    """The committed run (package data)."""
    text = resources.files("course_lib.chapters.ch09_flash_triton").joinpath("data", name)
    return json.loads(text.read_text(encoding="utf-8"))


def describe(data: dict[str, Any]) -> str:
    """Short lines: GPU and driver; torch and Triton versions (and a line saying so where they
    are not the ones installed here); shapes, dtype, timing method."""
    from course_lib.toolkit.bench.report import versions_note

    m = data["machine"]
    note = versions_note({"torch": m["torch_version"], "triton": m["triton_version"]})
    return (f"{m['device_name']} ({m.get('multiprocessors', '?')} SMs), driver "
            f"{m.get('driver_version', '?')}, cuDNN {m.get('cudnn_version', '?')}\n"
            f"torch {m['torch_version']}, Triton {m['triton_version']}{note}\n"
            f"(B, H) = ({data['batch']}, {data['heads']}), {data['dtype']}\n"
            f"timed with {data['time_method']}")


def _row(data: dict[str, Any], impl: str, L: int, E: int, causal: bool, backward: bool
         ) -> dict[str, Any] | None:
    for r in data["rows"]:
        if (r["impl"], r["L"], r["E"], r["causal"], r["backward"]) == (impl, L, E, causal,
                                                                        backward):
            return r
    return None


def ms(data: dict[str, Any], impl: str, L: int, E: int, causal: bool = False,
       backward: bool = False) -> float | None:
    """Median milliseconds of one call (None where it did not run)."""
    row = _row(data, impl, L, E, causal, backward)
    return None if row is None else row.get("ms")


def share_of_best_torch(data: dict[str, Any], L: int, E: int, causal: bool = False,
                        backward: bool = False) -> float:
    """Speed of the course's kernels as a fraction of torch's fastest backend at this point:
    ``min over backends of their time ÷ the course's time`` (1 = as fast)."""
    best = min(t for b in TORCH_BACKENDS
               if (t := ms(data, b, L, E, causal, backward)) is not None)
    return best / ms(data, "triton", L, E, causal, backward)


def points(data: dict[str, Any]) -> list[tuple[int, int, bool, bool]]:
    """Every measured ``(L, E, causal, backward)``, sorted."""
    return sorted({(r["L"], r["E"], r["causal"], r["backward"]) for r in data["rows"]})


def matmul_tflops(data: dict[str, Any]) -> float:
    """The bf16 matmul rate measured at the end of the same run (median), TFLOP/s."""
    return data["matmul_bf16"]["gflops_median"] / 1e3


def rate_series(data: dict[str, Any], E: int, causal: bool = False, backward: bool = False
                ) -> dict[str, list[tuple[int, float]]]:
    """TFLOP/s against L for each implementation (for ``toolkit.plotting.rate_plot``)."""
    return {impl: sorted((r["L"], r["tflops"]) for r in data["rows"]
                         if (r["impl"], r["E"], r["causal"], r["backward"]) ==
                         (impl, E, causal, backward) and "tflops" in r) for impl in IMPLS}


def timing_table(data: dict[str, Any], L: int) -> str:
    """Markdown: at length ``L``, TFLOP/s of each implementation per (E, mask, pass), and the
    course's speed as a fraction of torch's fastest backend."""
    head = ["E", "mask", "pass", *(f"{LABELS[i]}" for i in IMPLS), "course ÷ best torch"]
    lines = ["| " + " | ".join(head) + " |", "|---:|---|---|" + "---:|" * (len(head) - 3)]
    for (length, E, causal, backward) in points(data):
        if length != L:
            continue
        rows = [_row(data, impl, L, E, causal, backward) for impl in IMPLS]
        rates = ["–" if r is None or "tflops" not in r else f"{r['tflops']:.0f}" for r in rows]
        lines.append(f"| {E} | {'causal' if causal else 'full'} | "
                     f"{'fwd+bwd' if backward else 'forward'} | " + " | ".join(rates) +
                     f" | {share_of_best_torch(data, L, E, causal, backward):.2f} |")
    return "\n".join(lines)


def check_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Max |error| against float32 attention on the same bf16 inputs, per (E, mask) and path:
    the course's kernels next to each torch backend (the error bf16 costs anyone)."""
    rows = []
    for c in data["checks"]:
        for impl, err in c["errors"].items():
            if "unavailable" in err:
                continue
            rows.append({"E": c["E"], "mask": "causal" if c["causal"] else "full",
                         "path": LABELS[impl], **{k: f"{err[k]:.1e}" for k in
                                                  ("out", "dq", "dk", "dv")}})
    return rows


def tuning_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The launch settings tried at the tuning length, with their median ms (or the error)."""
    kernels = {"forward": "forward", "forward+backward": "backward (timed with the forward)"}
    return [{"E": t["E"], "kernel": kernels[t["pass"]],
             "block_m × block_n": f"{t['config'][0]} × {t['config'][1]}",
             "warps": t["config"][2], "stages": t["config"][3],
             "ms": f"{t['ms']:.2f}" if "ms" in t else t.get("error", "")}
            for t in data["tuning"]]
