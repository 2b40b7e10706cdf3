"""The chapter map on the landing page is drawn from _toc.yml: every chapter has a box, in order."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("chapter_map", ROOT / "tools" / "chapter_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_chapter_has_a_box_and_the_svg_is_current():
    tool = _tool()
    stems = tool.toc_chapters()
    assert stems and all(s in tool.CHAPTERS for s in stems), set(stems) - set(tool.CHAPTERS)
    assert tool.main(["--check"]) == 0, "run tools/chapter_map.py after changing _toc.yml"
    svg = tool.SVG.read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r'text-anchor="middle" fill="#fff">(\d+)<', svg)]
    assert numbers == [int(s[:2]) for s in stems]   # the box number is the chapter number
    for stem in stems:
        assert tool.escape(tool.CHAPTERS[stem][0]) in svg


def test_the_map_follows_the_toc_order(monkeypatch):
    tool = _tool()
    stems = ["01_library_analogy", "03_softmax", "02_scaling"]
    svg = tool.draw(stems)
    order = [svg.index(f">{tool.escape(tool.CHAPTERS[s][0])}<") for s in stems]
    assert order == sorted(order)
    assert svg.count("<rect x=") == 3 and svg.count('marker-end="url(#arr)"') == 2
