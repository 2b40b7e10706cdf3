"""Chapter 9 (FlashAttention in Triton): reference kernels, their launchers and the checking
support that runs learners' kernels on a CPU under Triton's interpreter.

Importing this package sets ``TRITON_INTERPRET=1`` (unless it is already set) when no CUDA device
is present: Triton reads it when a kernel is defined (``@triton.jit``), so the notebook's first
course cell imports through here before any kernel is defined (``course_lib/__init__`` sets it
too, before torch.nn.attention imports triton.language). Triton itself is optional (Linux
x86-64 wheels only): :data:`TRITON_AVAILABLE` says whether it imported, :data:`TRITON_MISSING`
why not.
"""

from __future__ import annotations

import importlib.util
import os
import platform

import torch


def _setup() -> tuple[bool, bool, str]:
    """(triton importable, interpreter mode, why not importable)."""
    if importlib.util.find_spec("triton") is None:
        return False, False, (f"Triton is not installed (it ships for Linux x86-64 only; this "
                              f"machine is {platform.system()} {platform.machine()})")
    if not torch.cuda.is_available():
        # Triton reads it when a kernel is defined (``@triton.jit``); torch may already have
        # imported triton, which is harmless as long as no kernel was defined before this.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    try:
        import triton.language as tl
    except Exception as e:  # a broken install: the chapter says so and skips
        return False, False, f"Triton did not import ({type(e).__name__}: {e})"
    if interpret and type(tl.max).__name__ != "InterpretedFunction":
        return False, False, ("triton.language was imported before TRITON_INTERPRET=1 was set: "
                              "restart the kernel and import course_lib before anything else")
    return True, interpret, ""


TRITON_AVAILABLE, INTERPRETED, TRITON_MISSING = _setup()


#: Code cells containing any of these use Triton; without it :func:`skip_triton_cells` skips them.
TRITON_MARKERS = ("triton.", "tl.", "kernels.", "checking.", 'check("triton_')


def skip_triton_cells() -> bool:
    """Without Triton, make the notebook's Triton cells print why they are skipped (True if so).

    Registers an IPython input transformer: a code cell mentioning :data:`TRITON_MARKERS` runs
    ``print("Skipped: ...")`` instead. With Triton, or outside IPython, it does nothing.
    """
    if TRITON_AVAILABLE:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    message = f"Skipped: {TRITON_MISSING}. The rest of the course does not need Triton."

    def transform(lines: list[str]) -> list[str]:
        if any(marker in "".join(lines) for marker in TRITON_MARKERS):
            return [f"print({message!r})\n"]
        return lines

    shell.input_transformers_cleanup.append(transform)
    return True
