"""Every figure of the book has a real text alternative (WCAG 2.1 SC 1.1.1; issue 45).

A code cell whose stored outputs hold an image declares its ``alt`` where the figure is made, in
the cell's MyST-NB metadata (``mystnb: {image: {alt: ...}}``, which myst-nb 1.x copies onto the
``<img>``; without it the book's ``alt`` is the image's file path, which a screen reader reads
out). The alt says what the figure shows, the data's message: not empty, not a file name, not the
caption again, and not the same words as another figure of the chapter. The browser test checks
the built pages' ``<img>`` the same way (``tests/browser/probe.py``: ``check_image_alts``), the
players' frames included.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
MIN_WORDS = 8
# A file name or path: what myst-nb writes when no alt is given ("../_images/5ba8b6....png").
FILE_LIKE = re.compile(r"(\.(png|jpe?g|svg|gif)\b)|(_images/)|(^[\w./-]+$)", re.I)


def alt_problem(alt: object, caption: str = "") -> str | None:
    """Why ``alt`` is not a real text alternative (None: it is one)."""
    if not isinstance(alt, str) or not alt.strip():
        return "no alt text"
    text = alt.strip()
    if FILE_LIKE.search(text):
        return f"alt text is a file name: {text!r}"
    if len(text.split()) < MIN_WORDS:
        return f"alt text too short to say what the figure shows ({len(text.split())} words)"
    if caption and _words(text) == _words(caption):
        return "alt text repeats the caption"
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def figure_cells(path: Path):
    """(cell id, alt, caption) of each code cell whose stored outputs hold an image."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        if not any(t in o.get("data", {}) for o in cell.get("outputs", []) for t in IMAGE_TYPES):
            continue
        mystnb = cell.get("metadata", {}).get("mystnb", {})
        yield (cell.get("id", f"cell {i}"), mystnb.get("image", {}).get("alt"),
               mystnb.get("figure", {}).get("caption", ""))


def test_the_alt_checks_catch_what_they_should():
    assert alt_problem(None) == "no alt text" and alt_problem("  ") == "no alt text"
    assert "file name" in alt_problem("../_images/5ba8b6c0e1.png")
    assert "file name" in alt_problem("fig-lib-temperature")
    assert "too short" in alt_problem("A line chart.")
    caption = "The weight of each book as the temperature grows, for the query shown."
    assert alt_problem(caption, caption) == "alt text repeats the caption"
    assert alt_problem("Five curves of weight against temperature: one book takes all the "
                       "weight when T is small; all five meet at 0.2 when T is large.",
                       caption) is None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_a_real_text_alternative(path):
    problems, seen = [], {}
    for cell_id, alt, caption in figure_cells(path):
        problem = alt_problem(alt, caption)
        if problem is None and _words(alt) in seen.values():
            problem = "alt text identical to another figure's"
        if problem:
            problems.append(f"cell {cell_id}: {problem}")
        else:
            seen[cell_id] = _words(alt)
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)
