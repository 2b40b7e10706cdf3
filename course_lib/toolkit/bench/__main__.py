"""Command line: ``python -m course_lib.bench [--device cpu] [--n 256 512 ...] --out DIR``."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from course_lib.toolkit.bench import RESULTS_DIR
from course_lib.toolkit.bench.report import check_targets, write_report
from course_lib.toolkit.bench.sweep import DEFAULT_N, run_sweep


def _ints(values: Sequence[str]) -> list[int]:
    out: list[int] = []
    for v in values:
        out += [int(x) for x in str(v).replace(",", " ").split()]
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m course_lib.bench",
        description="Time and measure attention implementations (course_lib.IMPLEMENTATIONS and "
                    "torch's SDPA called directly) over sequence lengths; write JSON + markdown.")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default: cpu)")
    p.add_argument("--dtype", default=None,
                   choices=["float32", "float64", "bfloat16", "float16"],
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--n", nargs="+", default=[str(n) for n in DEFAULT_N],
                   help="sequence lengths (space or comma separated)")
    p.add_argument("--d", type=int, default=64, help="head dimension (default 64)")
    p.add_argument("--heads", type=int, default=8, help="number of heads H (default 8)")
    p.add_argument("--batch", type=int, default=1, help="batch size B (default 1)")
    p.add_argument("--causal", choices=["no", "yes", "both"], default="both",
                   help="causal masking (default: both)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up calls per point (default 1)")
    p.add_argument("--impls", nargs="+", default=None,
                   help="implementations (default: reference flash sdpa torch)")
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--out", default=str(RESULTS_DIR),
                   help="output directory (default: the results shipped with course_lib)")
    p.add_argument("--name", default=None,
                   help="file stem (default: <device>-<dtype>[-backward])")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--naive-max-n", type=int, default=None,
                   help="skip the naive reference above this n (default 4096 CPU, 16384 CUDA)")
    p.add_argument("--matmul-size", type=int, default=None,
                   help="square matmul yardstick size (default 2048 CPU, 8192 CUDA)")
    p.add_argument("--min-sample-s", type=float, default=0.02,
                   help="repeat fast calls so one sample lasts this long (default 0.02 s)")
    p.add_argument("--memory", choices=["fresh", "batched", "none"], default="fresh",
                   help="peak memory: a fresh subprocess per point (default), one fresh "
                        "subprocess for all points (high-water mark reset between points), "
                        "or skip")
    p.add_argument("--no-memory", action="store_true", help="same as --memory none")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    causal = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    data = run_sweep(
        _ints(args.n), args.impls, d=args.d, heads=args.heads, batch=args.batch, causal=causal,
        dtype=args.dtype, device=args.device, rounds=args.rounds, warmup=args.warmup,
        backward=args.backward,
        memory=False if args.no_memory or args.memory == "none" else
        ("batched" if args.memory == "batched" else True), naive_max_n=args.naive_max_n,
        matmul_size=args.matmul_size, min_sample_s=args.min_sample_s, threads=args.threads,
        progress=not args.quiet,
        command="python -m course_lib.bench " + " ".join(shlex.quote(a) for a in argv),
    )
    json_path, md_path = write_report(data, args.out, args.name)
    print(f"wrote {json_path} and {md_path}")
    for ch in check_targets(data):
        print(f"{'ok ' if ch['passed'] else 'MISS'} {ch['name']} at n={ch['at_n']}: "
              f"{ch['measured']:.3f} (target {ch['target']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
