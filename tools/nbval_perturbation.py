"""Choose the perturbed CPU kernels for the second nbval run from what this host runs correctly.

    python tools/nbval_perturbation.py --python .venv/bin/python [--report FILE]

Prints one line of ``NAME=VALUE`` words for ``env`` (the perturbation), and explains the choice on
standard error (and in ``--report``). Standard library only; torch runs in the child interpreters.

The perturbed stage proves that stored outputs do not depend on the SIMD level, the kernel library
or the thread count. It must never ask torch for a combination that torch itself gets wrong on the
host: on a CPU with AMX (``amx_bf16``), torch 2.13 raises ``pack_vnni2 is only supported when
avx512 is supported`` for bfloat16 SDPA under CPU autocast whenever ``ATEN_CPU_CAPABILITY`` is
forced below the hardware's level while oneDNN still sees AMX (docs/upstream/torch-pack-vnni2.md).
Each candidate below is probed in a fresh interpreter: the known repro, a few kernels of the kinds
the chapters run (float32 and bfloat16 matmuls, SDPA with and without autocast), and a check that
torch really runs at the requested capability. The first candidate that passes is used.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass

PROBE = r"""
import os, torch, torch.nn.functional as F
torch.manual_seed(0)
want = os.environ.get("ATEN_CPU_CAPABILITY")
got = torch.backends.cpu.get_cpu_capability()
if want and got.lower() != want.lower():
    raise SystemExit(f"asked for ATEN_CPU_CAPABILITY={want}, torch runs {got}: not a perturbation")
q = torch.randn(1, 4, 64, 16)
# torch 2.13's own bug on AMX hosts (docs/upstream/torch-pack-vnni2.md): the repro as filed.
with torch.autocast("cpu", dtype=torch.bfloat16):
    x = torch.nn.Linear(16, 16)(q)
    F.scaled_dot_product_attention(x, x, x, is_causal=True)
# The kernels the chapters lean on, each in float32 and bfloat16.
for dtype in (torch.float32, torch.bfloat16):
    a = torch.randn(2, 4, 96, 32, dtype=dtype)
    F.scaled_dot_product_attention(a, a, a, is_causal=True)
    F.scaled_dot_product_attention(a, a, a, attn_mask=torch.ones(96, 96, dtype=torch.bool))
    (a @ a.transpose(-2, -1)).softmax(-1)
    torch.nn.Linear(32, 32).to(dtype)(a).sum()
w = torch.randn(8, 64, 32, requires_grad=True)
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = torch.nn.Linear(32, 32)(w)
    F.scaled_dot_product_attention(y, y, y, is_causal=True).float().sum().backward()
print("probe-ok", got)
"""


@dataclass(frozen=True)
class Candidate:
    env: tuple[tuple[str, str], ...]
    why: str

    def words(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env)


# Most perturbed first. ONEDNN_MAX_CPU_ISA lowers oneDNN (bfloat16 matmuls, its AMX micro-kernels)
# as ATEN_CPU_CAPABILITY lowers ATen's own; OMP_NUM_THREADS=1 changes every reduction's split.
CANDIDATES = (
    Candidate((("ATEN_CPU_CAPABILITY", "default"), ("ONEDNN_MAX_CPU_ISA", "AVX2"),
               ("OMP_NUM_THREADS", "1")),
              "ATen's portable kernels, oneDNN at AVX2, one thread"),
    Candidate((("ATEN_CPU_CAPABILITY", "default"), ("OMP_NUM_THREADS", "1")),
              "ATen's portable kernels, one thread (oneDNN as the host has it)"),
    Candidate((("ATEN_CPU_CAPABILITY", "avx2"), ("ONEDNN_MAX_CPU_ISA", "AVX2"),
               ("OMP_NUM_THREADS", "1")),
              "ATen and oneDNN at AVX2, one thread"),
    Candidate((("OMP_NUM_THREADS", "1"),),
              "one thread only: no lower SIMD level runs correctly on this host"),
)


def probe(python: str, cand: Candidate, timeout: float = 120.0) -> str | None:
    """None when ``cand`` runs the probe cleanly, else the reason (the error's last line)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")}
    env.update(dict(cand.env))
    try:
        done = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"probe timed out after {timeout:.0f} s"
    if done.returncode == 0 and "probe-ok" in done.stdout:
        return None
    lines = [ln for ln in (done.stderr + done.stdout).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def choose(python: str) -> tuple[Candidate, list[str]]:
    """The first candidate this host runs correctly, and one line per candidate tried."""
    log = []
    for cand in CANDIDATES:
        reason = probe(python, cand)
        if reason is None:
            log.append(f"  ok      {cand.words()}  ({cand.why})")
            return cand, log
        log.append(f"  refused {cand.words()}: {reason}")
    raise SystemExit("nbval perturbation: no candidate runs on this host:\n" + "\n".join(log))


def cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    shown = [x for x in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
                             if x in have]
                    return " ".join(shown) or "none of avx2/avx512/amx"
    except OSError:
        pass
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter with torch")
    ap.add_argument("--report", help="also write the explanation to this file")
    args = ap.parse_args(argv)
    cand, log = choose(args.python)
    text = "\n".join([f"nbval perturbation: {cand.words()}", f"  why: {cand.why}",
                      f"  host CPU flags: {cpu_flags()}", "  candidates, most perturbed first:",
                      *log])
    print(text, file=sys.stderr)
    if args.report:
        os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(cand.words())
    return 0


if __name__ == "__main__":
    sys.exit(main())
