"""`import course_lib` stays light: every process that starts the course pays for it (a notebook's
kernel, the CLI, each notebook a grader runs, each check's worker).

torch itself is needed. ``torch._dynamo`` (through ``torch.nn.attention.bias``) and matplotlib
(through the benchmark's progress bars) are not, and together they tripled the import time; nor
is ``torch.utils.benchmark``, which imports setuptools (0.15-0.25 s); they load when something
uses them. A ``CausalBias`` mask made after the import still works, because
the course looks for it only once its module is loaded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

FRESH_PROCESS = textwrap.dedent("""
    import sys
    import course_lib
    heavy = sorted(m for m in ("torch._dynamo", "matplotlib", "torch.nn.attention.bias", "triton",
                               "torch.utils.benchmark", "setuptools")
                   if m in sys.modules)
    print("heavy:", heavy)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right   # imported after course_lib

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(4, 6))
    for name, attend in course_lib.IMPLEMENTATIONS.items():
        got = attend(q, k, v, attn_mask=causal_lower_right(4, 6))
        print(name, float((got - want).abs().max()) < 1e-5)
        try:
            attend(q, k, v, attn_mask=causal_lower_right(4, 6), is_causal=True)
            print(name, "accepted is_causal with a CausalBias")
        except ValueError as e:
            print(name, "refused:", "CausalBias" in str(e))
""")


def test_import_leaves_dynamo_and_matplotlib_unloaded_and_causal_bias_still_works():
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "heavy: []", lines[0]
    # The lower-right bias (L = 4 < S = 6) is not the top-left mask of is_causal=True: an
    # implementation that missed the bias would give a different answer, or none.
    names = list(__import__("course_lib").IMPLEMENTATIONS)
    assert lines[1:] == [x for n in names for x in (f"{n} True", f"{n} refused: True")], lines


def test_nbformat_does_not_build_an_iri_parser_on_import():
    """Every pytest process (nbval's plugin), nbclient run, grading process and Jupyter server
    imports nbformat, which imports jsonschema. jsonschema 4.24+ imports rfc3987-syntax when it
    is installed, and that builds a lark Earley parser at import: 1.3 s of CPU per process
    (0.13 s without it). constraints.txt pins jsonschema 4.23.0, whose format checkers use
    rfc3986-validator; this fails if an upgrade brings the parser back."""
    proc = subprocess.run([sys.executable, "-c", "import sys, nbformat; print(sorted(m for m in "
                           "('rfc3987_syntax', 'lark') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
