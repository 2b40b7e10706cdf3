"""Feedback a learner can act on and a summary that names people (issue 53), on a small class's
results written by hand (the verdicts of a graded class are asserted in test_grading.py and
test_grading_cluster.py: here only what the outputs make of them)."""

from __future__ import annotations

from course_lib.toolkit.checking import get_exercise
from course_lib.toolkit.grading import feedback

POINTS = {"softmax": 2.0, "self_attention": 3.0}
SOFTMAX_SRC = "import torch\n\ndef softmax(x, dim=-1):\n    e = x.exp()\n    return e / e.sum()\n"
EVIL = "boom <script>alert(1)</script>\n# ✓ passed\n[click](http://x.example) | `x`"


def _result(learner, verdicts, status="checked", late=0.0, factor=1.0, sources=None):
    return {"learner": learner, "notebook": f"/s/{learner}.ipynb", "chapter": "03_softmax",
            "status": status, "detail": "", "late_days": late, "late_factor": factor,
            "sources": sources or {},
            "verdicts": [{"exercise": e, "verdict": v, "mistake": m, "message": msg,
                          "seconds": 0.1} for e, v, m, msg in verdicts]}


def _class() -> list[dict]:
    nyet = get_exercise("softmax").mistakes[0]
    return [
        _result("alice", [("softmax", "passed", "", ""), ("self_attention", "passed", "", "")]),
        _result("bob", [("softmax", "failed", nyet.id, nyet.message + "\nFirst failing case."),
                        ("self_attention", "not_attempted", "", "")],
                late=1.5, factor=0.8, sources={"softmax": SOFTMAX_SRC}),
        _result("eve", [("softmax", "error", "raised", EVIL),
                        ("self_attention", "not_attempted", "", "")], status="raised"),
    ]


def test_feedback_gives_points_late_deduction_total_mistake_hint_and_where():
    results = _class()
    text = feedback.feedback_markdown("bob", [results[1]], POINTS)
    nyet = get_exercise("softmax").mistakes[0]
    assert "**Total: 0 of 5 points.**" in text
    assert "1.5 days late" in text and "20% deducted" in text
    assert "| `softmax` | 0 of 2 | Not yet |" in text
    assert "| `self_attention` | 0 of 3 | Not attempted |" in text
    head = next(x for x in text.splitlines() if x.startswith("## ✗ `softmax`"))
    assert head.endswith(": Not yet: " + feedback.escape(nyet.message.split(". ")[0] + "."))
    assert "failed" not in text.lower().replace("first failing", "")
    assert "starts with `def softmax(x, dim=-1):`" in text       # its first line, no cell number
    assert "cell" not in text.split("## ✗")[1].split("\n")[1]
    assert 'exercises.hint("softmax")' in text
    assert feedback.escape(get_exercise("softmax").hints[0]) in text
    alice = feedback.feedback_markdown("alice", [results[0]], POINTS)
    assert "**Total: 5 of 5 points.**" in alice and "late" not in alice
    assert "Read next" not in alice


def test_feedback_escapes_what_a_learner_wrote():
    text = feedback.feedback_markdown("eve", [_class()[2]], POINTS)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "\n# ✓ passed" not in text and "\\# ✓ passed" in text
    assert "[click]" not in text and "\\[click\\]" in text and "\\`x\\`" in text
    assert feedback.escape("1. item\n- item\n===") == "1\\. item\n\\- item\n\\==="


def test_summary_names_missing_late_and_broken_learners_with_mistake_titles():
    roster = {"alice": "Alice", "bob": "Bob", "eve": "Eve", "zoe": "Zoe"}
    text = feedback.summary_markdown(_class(), POINTS, roster)
    nyet = get_exercise("softmax").mistakes[0]
    assert "4 learners: 3 handed in; missing: zoe; late: bob (1.5 days)" in text
    assert "did not run or not graded: eve (raised)" in text
    line = next(x for x in text.splitlines() if x.startswith("| softmax"))
    assert "1/4" in line and nyet.id not in line and nyet.message.split(". ")[0] in line


def test_class_report_page_has_figures_with_alt_text_names_and_similar_pairs():
    from course_lib.toolkit.grading import class_report

    results = _class()
    copied = SOFTMAX_SRC.replace("    e = x.exp()\n", "    # my own work\n    e = x.exp()\n\n")
    results[0]["sources"] = {"softmax": copied}
    results[2]["sources"] = {"softmax": "def softmax(x):\n    return (x - x.max()).exp()\n"}
    page = class_report.class_report_html(results, POINTS, {"alice": "", "bob": "", "eve": "",
                                                            "zoe": ""})
    assert page.count('<img src="data:image/png;base64,') == 2
    assert 'alt="Histogram of the 4 learners&#x27; totals out of 5: 3 at 0, 1 at 5."' in page
    assert "softmax 25%" in page                                # the pass-rate figure's alt
    assert "Missing: zoe" in page and "Late: bob (1.5 days)" in page
    assert "eve: raised" in page and "<script>" not in page
    nyet = get_exercise("softmax").mistakes[0].message.split(". ")[0]
    assert f"<td>softmax</td><td>{__import__('html').escape(nyet)}.</td><td>1</td>" in page
    pairs = class_report.similar_pairs(results)
    assert pairs == [(1.0, "softmax", "alice", "bob")]        # comments and blank lines aside
    assert "<td>1.000</td><td>softmax</td><td>alice, bob</td>" in page
