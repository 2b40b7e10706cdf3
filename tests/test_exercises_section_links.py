"""A diagnosis names the chapter section that explains it, as a link (issue 51): in the
workbook to the learner's copy of the chapter at that heading, in the book to the page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_lib.toolkit.checking._engine import run_check
from course_lib.toolkit.checking._registry import registry
from course_lib.toolkit.checking._result import link_sections

ROOT = Path(__file__).resolve().parent.parent


def _headings(doc: str) -> set[str]:
    nb = json.loads((ROOT / "book" / f"{doc}.ipynb").read_text(encoding="utf-8"))
    out = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"#{1,6}\s+(.*)", line)
                if m:
                    out.add(m.group(1).strip())
    return out


def _sections() -> set[str]:
    return {p.section for ex in registry().values() for p in ex.probes}


@pytest.mark.parametrize("section", sorted(_sections()))
def test_every_probe_section_is_a_heading_of_its_chapter(section):
    """The text the message quotes is the heading as written (math aside), so the link's
    anchor finds it."""
    doc, _, title = section.partition(": ")
    plain = {re.sub(r"\$([^$]*)\$", r"\1", h).replace("\\operatorname{Var}", "Var")
             .replace("\\cdot", "·").replace("`", "") for h in _headings(doc)}
    assert title in _headings(doc) or title in plain, (doc, title)


def test_a_diagnosis_links_its_section_in_the_workbook_and_in_the_book(monkeypatch):
    monkeypatch.delenv("COURSE_LIB_BOOK", raising=False)
    text = ("Your output equals ... (See chapter 10, § “One cached step: offset, append, "
            "attend”.) Also (See the exercise&#x27;s statement, chapter 4.)")
    lab = link_sections(text)
    assert '<a href="10_inference.ipynb#One-cached-step:-offset,-append,-attend">' in lab
    assert '<a href="04_multi_head.ipynb#Exercises">' in lab
    monkeypatch.setenv("COURSE_LIB_BOOK", "1")
    book = link_sections(text)
    assert '<a href="10_inference.html#one-cached-step-offset-append-attend">' in book
    assert '<a href="04_multi_head.html#exercises">' in book


def test_a_checks_html_carries_the_link(monkeypatch):
    monkeypatch.delenv("COURSE_LIB_BOOK", raising=False)
    ex = registry()["scaled_scores"]
    result = run_check(ex, lambda q, k: q @ k.transpose(-2, -1) * 0.3, seed=0,
                       isolate=False, watch=False)
    assert result.mistake == "wrong_scale", result.message
    assert "(See chapter 2, § “The math: Var(q · k) = E”.)" in result.message
    assert '(See <a href="02_scaling.ipynb#The-math:' in result._repr_html_()
