"""Every ``TorchDispatchMode`` of the course is an ``EagerDispatchMode`` (toolkit.dispatch_mode).

torch then does not wrap its ``__torch_dispatch__`` in ``torch._dynamo.disable``, so entering one
never imports ``torch._dynamo``. That import took 2 s in every fresh process and in every forked
check worker: a check of the Triton flash exercise (chapter 9's ``_HostOps``) took 4.2 s, now
1.5 s. In a fresh interpreter, since this one may have imported ``torch._dynamo`` already."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "course_lib"

CODE = r'''
import sys
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.toolkit.checking._sandbox import CallOutcome, _Watch
from course_lib.toolkit.dispatch_mode import EagerDispatchMode
from course_lib.chapters.ch08_flash.helpers import ShapeRecorder
from course_lib.chapters.ch09_flash_triton.exercises import _HostOps
from course_lib.chapters.ch10_inference import helpers as ch10
from course_lib.chapters.ch13_across_devices.helpers import Meter

assert "torch._dynamo" not in sys.modules, "imported before any mode ran"
x = torch.randn(2, 3)
for mode in (_Watch({}, None, CallOutcome()), ShapeRecorder(), _HostOps(), Meter()):
    with mode:
        (x @ x.T).softmax(-1)
assert isinstance(ch10.kv_copies(F.scaled_dot_product_attention), list)
assert ch10.aten_ops(F.scaled_dot_product_attention)      # chapter 10's two recorders
assert "torch._dynamo" not in sys.modules, "a course mode imported torch._dynamo"


def every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from every(sub)


ours = [c for c in every(TorchDispatchMode) if c.__module__.startswith("course_lib")]
assert len(ours) >= 6, ours          # _Watch, ShapeRecorder, _HostOps, Meter, ch10's two
wrong = [c.__qualname__ for c in ours if not issubclass(c, EagerDispatchMode)]
assert not wrong, wrong
print("ok")
'''


def test_no_course_dispatch_mode_imports_dynamo(tmp_path):
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path,
                          env={"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                               "COURSE_LIB_PROGRESS": str(tmp_path / "progress.sqlite3")})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_only_eager_dispatch_mode_subclasses_torch_s_class():
    """Also the modes of modules the test above does not import: in the source, a class of the
    package may name ``TorchDispatchMode`` as its base only in ``toolkit/dispatch_mode.py``."""
    direct = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).endswith("TorchDispatchMode") for base in node.bases):
                direct.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert direct == ["toolkit/dispatch_mode.py:EagerDispatchMode"], direct
