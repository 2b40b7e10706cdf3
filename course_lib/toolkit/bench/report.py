"""Reading and writing sweep results: JSON, a markdown table, and the course's target checks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .sweep import SCHEMA

MiB = 2**20
REQUIRED_META = ("device", "dtype", "torch_version", "threads", "cpu_model", "batch", "heads", "d",
                 "rounds", "flop_convention", "matmul")
REQUIRED_ROW = ("impl", "n", "causal", "flops")
TIMED_ROW = ("median_s", "best_s", "gflops_median", "frac_matmul")


def validate(data: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first missing piece of the ``course_lib.bench/1`` schema."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema must be {SCHEMA!r}, got {data.get('schema')!r}")
    for key in REQUIRED_META:
        if key not in data.get("meta", {}):
            raise ValueError(f"meta is missing {key!r}")
    for i, row in enumerate(data.get("results", [])):
        need = REQUIRED_ROW + (() if "skipped" in row else TIMED_ROW)
        for key in need:
            if key not in row:
                raise ValueError(f"results[{i}] ({row.get('impl')}, n={row.get('n')}) "
                                 f"is missing {key!r}")


def result_stem(meta: dict[str, Any]) -> str:
    """File stem: ``<device type>-<dtype>[-backward]``, e.g. ``cpu-float32``, ``cuda-bfloat16``."""
    dev = str(meta["device"]).split(":")[0]
    return f"{dev}-{meta['dtype']}" + ("-backward" if meta.get("backward") else "")


def write_json(data: dict[str, Any], path: str | Path) -> Path:
    validate(data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load_results(path: str | Path) -> dict[str, Any]:
    """Load (and validate) a results JSON file written by :func:`write_json`."""
    data = json.loads(Path(path).read_text())
    validate(data)
    return data


def rows(data: dict[str, Any], impl: str | None = None, causal: bool | None = None,
         timed_only: bool = True) -> list[dict[str, Any]]:
    """Result rows filtered by implementation and causality, sorted by n."""
    out = [r for r in data["results"]
           if (impl is None or r["impl"] == impl) and (causal is None or r["causal"] == causal)
           and (not timed_only or "skipped" not in r)]
    return sorted(out, key=lambda r: r["n"])


def _row(data: dict[str, Any], impl: str, n: int, causal: bool) -> dict[str, Any] | None:
    for r in data["results"]:
        if r["impl"] == impl and r["n"] == n and r["causal"] == causal and "skipped" not in r:
            return r
    return None


def _paired(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Median of per-round ratios a/b (rounds are interleaved, so pairs share the machine load)."""
    import statistics

    if "times_s" in a and "times_s" in b and len(a["times_s"]) == len(b["times_s"]):
        return float(statistics.median(x / y for x, y in zip(a["times_s"], b["times_s"],
                                                              strict=True)))
    return a["median_s"] / b["median_s"]


def check_targets(data: dict[str, Any], flash_n: int = 4096, rate_min_n: int = 1024,
                  ) -> list[dict[str, Any]]:
    """The course's targets, evaluated on one run (only those the run has data for).

    - ``sdpa`` time / ``torch`` time ≤ 1.05 (paired per-round ratio, worst n);
    - ``sdpa`` achieved rate ≥ 0.8 × matmul rate for every n ≥ ``rate_min_n`` (worst n);
    - ``flash`` time / ``sdpa`` time ≤ 2 at ``n = flash_n``;
    - ``flash`` peak extra memory ≤ 1/20 of ``reference``'s at ``n = flash_n``.
    """
    checks: list[dict[str, Any]] = []
    for c in sorted({r["causal"] for r in data["results"]}):
        tag = "causal" if c else "full"
        pairs = [(s, _row(data, "torch", s["n"], c)) for s in rows(data, "sdpa", c)]
        ratios = [(_paired(s, t), s["n"]) for s, t in pairs if t is not None]
        if ratios:
            worst, n = max(ratios)
            checks.append({"name": f"sdpa overhead vs torch ({tag})", "measured": worst,
                           "target": "<= 1.05", "passed": worst <= 1.05, "at_n": n})
        fracs = [(r["frac_matmul"], r["n"]) for r in rows(data, "sdpa", c) if r["n"] >= rate_min_n]
        if fracs:
            worst, n = min(fracs)
            checks.append({"name": f"sdpa rate / matmul rate, n >= {rate_min_n} ({tag})",
                           "measured": worst, "target": ">= 0.8", "passed": worst >= 0.8,
                           "at_n": n})
        f, s, ref = (_row(data, i, flash_n, c) for i in ("flash", "sdpa", "reference"))
        if f is not None and s is not None:
            ratio = _paired(f, s)
            checks.append({"name": f"flash time / sdpa time ({tag})", "measured": ratio,
                           "target": "<= 2", "passed": ratio <= 2.0, "at_n": flash_n})
        if f is not None and ref is not None and f.get("peak_extra_bytes") and \
                ref.get("peak_extra_bytes"):
            ratio = f["peak_extra_bytes"] / ref["peak_extra_bytes"]
            checks.append({"name": f"flash memory / naive memory ({tag})", "measured": ratio,
                           "target": "<= 0.05", "passed": ratio <= 0.05, "at_n": flash_n})
    return checks


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def to_markdown(data: dict[str, Any], impls: Sequence[str] | None = None) -> str:
    """A human-readable report: conditions, the yardstick, one table per causality, the checks."""
    m = data["meta"]
    mm = m["matmul"]
    impls = list(m.get("impls", [])) if impls is None else list(impls)
    unit, scale = ("TFLOP/s", 1e-3) if str(m["device"]).startswith("cuda") else ("GFLOP/s", 1.0)
    lines = [
        f"# Attention benchmark: {m['device']} ({m.get('device_name', '')}), {m['dtype']}"
        + (", forward+backward" if m.get("backward") else ", forward"),
        "",
        f"- Shapes: B={m['batch']}, H={m['heads']}, d={m['d']}; n = "
        + ", ".join(str(n) for n in m.get("ns", [])),
        f"- torch {m['torch_version']}, {m['threads']} threads, CPU: {m['cpu_model']}",
        f"- Run at {m.get('timestamp_utc', '?')}; load average (1, 5, 15 min) at start "
        f"{m.get('load_average_start')}, at end {m.get('load_average_end')}",
        f"- Timing: {m.get('time_method', '')}; {m['rounds']} rounds, median and best per call",
        f"- FLOPs: {m['flop_convention']}",
        f"- Matmul yardstick: {mm['size']}×{mm['size']} {mm['dtype']} matmul, "
        f"{_fmt(mm['gflops_median'] * scale, '.1f')} {unit} median, "
        f"{_fmt(mm['gflops_best'] * scale, '.1f')} {unit} best ({mm.get('how', '')})",
        f"- Peak extra memory: {m.get('memory_method') or 'not measured'}",
        f"- `torch` = {m.get('impl_notes', {}).get('torch', 'torch SDPA called directly')}",
        f"- Command: `{m.get('command', '')}`",
        "",
    ]
    for c in sorted({r["causal"] for r in data["results"]}):
        lines += [f"## {'Causal' if c else 'Full (non-causal)'} attention", "",
                  f"| n | impl | median ms | best ms | {unit} | × matmul rate | "
                  "peak extra MiB | time ÷ torch |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for n in sorted({r["n"] for r in data["results"]}):
            for impl in impls:
                r = next((x for x in data["results"] if x["impl"] == impl and x["n"] == n
                          and x["causal"] == c), None)
                if r is None:
                    continue
                if "skipped" in r:
                    lines.append(f"| {n} | {impl} | skipped | | | | | |")
                    continue
                mem = r.get("peak_extra_bytes")
                lines.append(
                    f"| {n} | {impl} | {r['median_s'] * 1e3:.2f} | {r['best_s'] * 1e3:.2f} | "
                    f"{r['gflops_median'] * scale:.1f} | {r['frac_matmul']:.2f} | "
                    f"{_fmt(None if mem is None else mem / MiB, '.1f')} | "
                    f"{_fmt(r.get('time_vs_torch_paired_median'), '.2f')} |")
        lines.append("")
    checks = check_targets(data)
    if checks:
        lines += ["## Targets", "", "| check | n | measured | target | met |",
                  "|---|---:|---:|---|---|"]
        for ch in checks:
            lines.append(f"| {ch['name']} | {ch['at_n']} | {ch['measured']:.3f} | "
                         f"{ch['target']} | {'yes' if ch['passed'] else 'NO'} |")
        lines.append("")
    lines.append("Time ÷ torch is the median over rounds of the per-round ratio (rounds are "
                 "interleaved, so each pair shares the machine's load).")
    return "\n".join(lines) + "\n"


def write_markdown(data: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_markdown(data))
    return path


def write_report(data: dict[str, Any], out_dir: str | Path, stem: str | None = None,
                 ) -> tuple[Path, Path]:
    """Write ``<out_dir>/<stem>.json`` and ``.md`` (stem from :func:`result_stem` by default)."""
    stem = result_stem(data["meta"]) if stem is None else stem
    out_dir = Path(out_dir)
    return write_json(data, out_dir / f"{stem}.json"), write_markdown(data, out_dir / f"{stem}.md")


# ----------------------------------------------------------------------------- chapter tables


def memory_table(data: dict[str, Any], causal: bool = False) -> str:
    """Markdown: peak extra MiB per n for reference, flash, sdpa, and naive ÷ flash."""
    by = {i: {r["n"]: r.get("peak_extra_bytes") for r in rows(data, i, causal)}
          for i in ("reference", "flash", "sdpa")}
    out = ["| n | naive MiB | flash MiB | sdpa MiB | naive ÷ flash |",
           "|---:|---:|---:|---:|---:|"]
    for n in sorted(by["flash"]):
        ref, fl, sd = by["reference"].get(n), by["flash"][n], by["sdpa"].get(n)
        out.append(f"| {n} | {_fmt(None if ref is None else ref / MiB, '.1f')} | "
                   f"{fl / MiB:.1f} | {_fmt(None if sd is None else sd / MiB, '.1f')} | "
                   f"{_fmt(None if ref is None else ref / fl, '.0f')} |")
    return "\n".join(out)


def timing_table(data: dict[str, Any]) -> str:
    """Markdown: median ms per implementation and the ratios the targets use, per (n, causal)."""
    out = ["| n | causal | naive ms | flash ms | sdpa ms | torch ms | flash ÷ sdpa | "
           "sdpa ÷ torch | sdpa × matmul rate |",
           "|---:|:---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in sorted({r["causal"] for r in data["results"]}):
        for n in sorted({r["n"] for r in rows(data, "flash", c)}):
            r = {i: _row(data, i, n, c) for i in ("reference", "flash", "sdpa", "torch")}
            ms = {i: None if x is None else x["median_s"] * 1e3 for i, x in r.items()}
            fs = None if r["sdpa"] is None else _paired(r["flash"], r["sdpa"])
            st = None if r["sdpa"] is None or r["torch"] is None else \
                _paired(r["sdpa"], r["torch"])
            frac = None if r["sdpa"] is None else r["sdpa"]["frac_matmul"]
            out.append(f"| {n} | {'yes' if c else 'no'} | " + " | ".join(
                _fmt(ms[i], ".0f") for i in ("reference", "flash", "sdpa", "torch"))
                + f" | {_fmt(fs, '.2f')} | {_fmt(st, '.3f')} | {_fmt(frac, '.2f')} |")
    return "\n".join(out)


def checks_table(data: dict[str, Any]) -> str:
    """Markdown table of :func:`check_targets`."""
    out = ["| target | n | measured | goal | met |", "|---|---:|---:|---|---|"]
    for ch in check_targets(data):
        out.append(f"| {ch['name']} | {ch['at_n']} | {ch['measured']:.3f} | {ch['target']} | "
                   f"{'yes' if ch['passed'] else 'no'} |")
    return "\n".join(out)


_SHOWN_AS = {"torch": "torch", "triton": "Triton"}


def versions_note(recorded: dict[str, str]) -> str:
    """"" when a committed run used the versions installed here (local tags such as "+cu130"
    aside); else a line that says so, e.g. "\n(this book runs torch 2.13.0; the numbers are
    that run's)". ``recorded``: package -> version in the run ("torch", "triton")."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    here = {pkg: installed(pkg) for pkg in recorded}
    differ = [f"{_SHOWN_AS.get(pkg, pkg)} {here[pkg].split('+')[0]}"
              for pkg, v in recorded.items()
              if here[pkg] is not None and str(v).split("+")[0] != here[pkg].split("+")[0]]
    if not differ:
        return ""
    return f"\n(this book runs {' and '.join(differ)}; the numbers are that run's)"


def describe_run(data: dict[str, Any]) -> str:
    """Short lines (they fit the book's column): the machine (a GPU's SMs, driver, CUDA and
    cuDNN versions where the run recorded them), the software and shapes (and
    :func:`versions_note`'s line where the run's torch is not the one installed here), and the
    conditions of the run."""
    m = data["meta"]
    gpu = (f" ({m.get('multiprocessors', '?')} SMs), driver {m['driver_version']}, CUDA "
           f"{m.get('cuda_version', '?')}, cuDNN {m.get('cudnn_version', '?')}"
           if m.get("driver_version") else "")
    return (f"{m.get('device_name', m['device'])}{gpu}, {m['threads']} threads\n"
            f"torch {m['torch_version']}, {m['dtype']}, B={m['batch']}, H={m['heads']}, "
            f"d={m['d']}{versions_note({'torch': m['torch_version']})}\n"
            f"{m['rounds']} rounds, run {m.get('timestamp_utc', '?')}, "
            f"load average at start {m.get('load_average_start')}")
