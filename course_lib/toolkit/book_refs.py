"""The book's numbering, for the learner's workbook: what the HTML book calls "(8.4)", "Fig. 1.2",
"Section 1.7", "Dao et al. (2022)", computed from the sources the book is built from.

Jupyter Book numbers per chapter (``_toc.yml`` ``numbered: true`` with ``numfig_secnum_depth: 1``):
the chapter number is the position of the chapter in the numbered part of ``_toc.yml``; labelled
display equations (``$$ ... $$ (label)``), captioned figures (MyST-NB ``mystnb.figure`` cell
metadata) and level-2 sections are numbered in their order within the chapter. Unlabelled
equations get no number. ``tests/test_workbook.py`` checks these numbers against a built book.

The book's web address comes from ``_config.yml``: ``html.baseurl`` when set, else the GitHub
Pages address of ``repository.url`` (``https://github.com/OWNER/REPO`` ->
``https://OWNER.github.io/REPO/``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CHAPTER_GLOB = "[0-9][0-9]_*.ipynb"
# A display equation: "$$" alone on a line, the body, then "$$" with an optional "(label)".
DISPLAY_MATH = re.compile(r"^(?P<indent>[ \t]*)\$\$[ \t]*\n(?P<body>.*?)\n[ \t]*\$\$[ \t]*"
                          r"(?:\((?P<label>[^)\s]+)\))?[ \t]*$", re.M | re.S)
LABEL_LINE = re.compile(r"^[ \t]*\((?P<label>[^)\s]+)\)=[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")


@dataclass(frozen=True)
class Target:
    """Something the book numbers: ``kind`` "eq" | "fig" | "sec" in chapter ``doc``."""

    kind: str
    doc: str            # "08_flash"
    number: str         # "8.4"
    title: str = ""     # a section's heading


@dataclass
class BookIndex:
    chapters: dict[str, int] = field(default_factory=dict)      # "08_flash" -> 8
    titles: dict[str, str] = field(default_factory=dict)        # "08_flash" -> its H1
    targets: dict[str, Target] = field(default_factory=dict)    # label -> Target
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)   # key -> (names, year)
    base_url: str = ""

    def page_url(self, doc: str, anchor: str = "") -> str:
        """The book's page of ``doc`` ("08_flash", "glossary"), optionally at ``#anchor``."""
        url = f"{self.base_url}book/{doc}.html"
        return f"{url}#{anchor}" if anchor else url


def _markdown(nb: dict) -> list[str]:
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = cell.get("source", "")
            out.append("".join(src) if isinstance(src, list) else str(src))
    return out


def segments(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into (is_code, chunk) runs of whole lines, code blocks (```python ... ```)
    apart from prose (a directive's body, ```{note} ... ```, is prose); "\n".join of the chunks
    gives ``text`` back."""
    runs: list[tuple[bool, list[str]]] = []
    stack: list[tuple[str, str]] = []          # ("code" | "directive", fence)
    for line in text.split("\n"):
        m = _FENCE.match(line)
        code = bool(stack) and stack[-1][0] == "code"
        if m:
            mark, rest = m.group(1), line.strip()[len(m.group(1)):]
            if code:
                if line.strip() == stack[-1][1]:
                    stack.pop()
            elif rest.startswith("{"):
                stack.append(("directive", mark))
            elif not rest and stack and stack[-1][1] == mark:
                stack.pop()
            else:
                stack.append(("code", mark))
                code = True
        if runs and runs[-1][0] == code:
            runs[-1][1].append(line)
        else:
            runs.append((code, [line]))
    return [(code, "\n".join(lines)) for code, lines in runs]


def in_prose(text: str, change) -> str:
    """``change(chunk)`` applied to the prose of ``text`` only (not to its code blocks)."""
    return "\n".join(chunk if code else change(chunk) for code, chunk in segments(text))


def chapter_targets(nb: dict, doc: str, number: int) -> tuple[str, dict[str, Target]]:
    """The H1 title of one chapter notebook and its numbered targets."""
    targets: dict[str, Target] = {}
    title, eq, fig, sec = "", 0, 0, 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            if figure.get("caption"):
                fig += 1
                if figure.get("name"):
                    targets[figure["name"]] = Target("fig", doc, f"{number}.{fig}")
            continue
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell.get("source", ""))
        prose = "\n".join(chunk for code, chunk in segments(text) if not code)
        for m in DISPLAY_MATH.finditer(prose):
            if m.group("label"):
                eq += 1
                targets[m.group("label")] = Target("eq", doc, f"{number}.{eq}")
        pending: str | None = None
        for line in prose.split("\n"):
            label = LABEL_LINE.match(line)
            if label:
                pending = label.group("label")
                continue
            heading = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
            if heading:
                level = len(heading.group(1))
                if level == 1 and not title:
                    title = heading.group(2)
                if level == 2:
                    sec += 1
                if pending:
                    num = f"{number}.{sec}" if level == 2 else str(number)
                    targets[pending] = Target("sec", doc, num, heading.group(2))
            if line.strip():
                pending = None
    return title, targets


def _author_names(persons) -> str:
    def last(p) -> str:
        name = " ".join(p.prelast_names + p.last_names)
        return re.sub(r"[{}]|\\[`'^\"~=.]", "", name)

    names = [last(p) for p in persons]
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


def read_citations(bib: Path) -> dict[str, tuple[str, str]]:
    """key -> ("Dao et al.", "2022") for every entry of a BibTeX file (pybtex parses it)."""
    if not bib.is_file():
        return {}
    from pybtex.database import parse_file

    out = {}
    for key, entry in parse_file(str(bib), "bibtex").entries.items():
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        names = _author_names(persons) if persons else entry.fields.get("title", key)
        out[key] = (names, str(entry.fields.get("year", "n.d.")))
    return out


def base_url(config: dict) -> str:
    """The book's web address (see the module), ending in "/"; "" when none can be derived."""
    url = (config.get("html") or {}).get("baseurl") or ""
    if not url:
        repo = (config.get("repository") or {}).get("url") or ""
        m = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", repo)
        if m:
            url = f"https://{m.group(1)}.github.io/{m.group(2)}/"
    return url if not url or url.endswith("/") else url + "/"


def _numbered_docs(toc: dict) -> list[str]:
    docs = []
    for part in toc.get("parts", []):
        if part.get("numbered"):
            docs += [Path(ch["file"]).name for ch in part.get("chapters", []) if "file" in ch]
    return docs


def build_index(source: Path) -> BookIndex:
    """The index of the book whose chapter notebooks are in ``source`` (``book/``); its
    ``_toc.yml``, ``_config.yml`` and ``references.bib`` are looked for in ``source``'s parent.
    Without a ``_toc.yml`` the chapters are numbered in file order."""
    import yaml

    root = source.parent
    toc_path, config_path = root / "_toc.yml", root / "_config.yml"
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8")) if toc_path.is_file() else {}
    config = (yaml.safe_load(config_path.read_text(encoding="utf-8"))
              if config_path.is_file() else {})
    notebooks = {p.stem: p for p in sorted(source.glob(CHAPTER_GLOB))}
    order = [d for d in _numbered_docs(toc or {}) if d in notebooks] or list(notebooks)
    index = BookIndex(base_url=base_url(config or {}))
    for number, doc in enumerate(order, start=1):
        nb = json.loads(notebooks[doc].read_text(encoding="utf-8"))
        index.chapters[doc] = number
        title, targets = chapter_targets(nb, doc, number)
        index.titles[doc] = title
        index.targets.update(targets)
    for page in sorted(source.glob("*.md")):
        heading = re.search(r"^#\s+(.*?)\s*$", page.read_text(encoding="utf-8"), re.M)
        index.titles.setdefault(page.stem, heading.group(1) if heading else page.stem)
    bibs = (config or {}).get("bibtex_bibfiles") or ["references.bib"]
    for bib in bibs:
        index.citations.update(read_citations(root / bib))
    return index
