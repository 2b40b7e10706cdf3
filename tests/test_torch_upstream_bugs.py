"""Bugs of torch itself that the course works around, pinned so that a fixed release says so.

Each test runs torch's own repro in a fresh interpreter (the CPU capability is chosen at start-up)
and is a *strict* expected failure where the bug applies: when a torch release fixes it, the test
passes unexpectedly, strict mode turns that into a failure, and the workaround can go.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import nbval_perturbation  # noqa: E402  (tools/ is not a package)

sys.path.pop(0)

PACK_VNNI2_REPRO = """
import torch, torch.nn.functional as F
q = torch.randn(1, 4, 64, 16)
with torch.autocast("cpu", dtype=torch.bfloat16):
    x = torch.nn.Linear(16, 16)(q)
    F.scaled_dot_product_attention(x, x, x, is_causal=True)
"""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


HAS_AMX = "amx_bf16" in _cpu_flags()


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(not HAS_AMX, reason="the bug needs a CPU with AMX (amx_bf16)")
@pytest.mark.xfail(strict=True, reason="torch's bug, not the course's: "
                   "docs/upstream/torch-pack-vnni2.md (torch 2.13 on AMX CPUs)")
def test_bf16_sdpa_under_autocast_runs_at_a_lowered_aten_capability() -> None:
    done = _run(PACK_VNNI2_REPRO, ATEN_CPU_CAPABILITY="default")
    # An expected failure must fail for the reason filed, not for any other.
    if done.returncode != 0:
        assert "pack_vnni2 is only supported when avx512 is supported" in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_repro_runs_unperturbed_and_with_onednn_lowered_too() -> None:
    """The workaround: the same repro runs at the host's own level, and with oneDNN lowered beside
    ATen (what the perturbed nbval stage asks for first)."""
    assert _run(PACK_VNNI2_REPRO).returncode == 0
    done = _run(PACK_VNNI2_REPRO, ATEN_CPU_CAPABILITY="default", ONEDNN_MAX_CPU_ISA="AVX2")
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_perturbation_probe_refuses_what_torch_gets_wrong_here() -> None:
    """The probe that chooses the perturbed nbval stage's kernels: a candidate torch runs wrongly
    on this host is refused with torch's error; the chosen one is a real perturbation."""
    lowered_aten_only = nbval_perturbation.CANDIDATES[1]
    assert dict(lowered_aten_only.env)["ATEN_CPU_CAPABILITY"] == "default"
    reason = nbval_perturbation.probe(sys.executable, lowered_aten_only)
    if HAS_AMX:
        assert reason is not None and "pack_vnni2" in reason
    else:
        assert reason is None
    chosen, log = nbval_perturbation.choose(sys.executable)
    assert dict(chosen.env).get("OMP_NUM_THREADS") == "1"
    assert log[-1].startswith("  ok") and chosen.words() in log[-1]
    # Asking for a level the CPU lacks is not a perturbation: the probe says so.
    fake = nbval_perturbation.Candidate((("ATEN_CPU_CAPABILITY", "zvector"),), "not x86")
    assert "not a perturbation" in (nbval_perturbation.probe(sys.executable, fake) or "")
