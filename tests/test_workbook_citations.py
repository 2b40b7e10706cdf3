"""The workbook's citations lead to their own entry of the book's bibliography (issue 54 item 16).

The book names each entry of its bibliography with sphinxcontrib-bibtex's ``bibtex_cite_id``
template (``_config.yml``: "cite-{key}", made an HTML id by docutils' ``make_id``), so the workbook
can link "Dao et al. (2022)" to ``<the book>/book/references.html#cite-dao2022flashattention``.
These tests need no built book: the ids the bibliography defines are computed as
sphinxcontrib-bibtex computes them, from ``references.bib`` and the template. The last test also
reads the built page where there is one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from docutils.nodes import make_id

from course_lib.toolkit import workbook
from course_lib.toolkit.book_refs import build_index, in_prose, read_citations

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
_LINK = re.compile(r"\]\((?P<url>[^()\s]*\.html(?:#[^()\s]*)?)\)")


def _keys() -> list[str]:
    keys: list[str] = []
    for bib in CONFIG.get("bibtex_bibfiles") or ["references.bib"]:
        keys += list(read_citations(ROOT / bib))
    return keys


def _defined_ids() -> set[str]:
    """The ids of the bibliography's entries, as sphinxcontrib-bibtex 2.x makes them
    (directives.py: ``make_id(bibtex_cite_id.format(bibliography_count=..., key=...))``)."""
    template = CONFIG["sphinx"]["config"]["bibtex_cite_id"]
    return {make_id(template.format(bibliography_count=1, key=k)) for k in _keys()}


def _cited(text: str) -> list[list[str]]:
    """The keys of each {cite}, {cite:t}, {cite:p} role of the prose of ``text``."""
    found: list[list[str]] = []

    def collect(prose: str) -> str:
        found.extend([k.strip() for k in m.group("text").split(",")]
                     for m in workbook._ROLE.finditer(prose) if m.group("role").startswith("cite"))
        return prose

    in_prose(text, collect)
    return found


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def test_the_book_names_its_entries_as_the_workbook_links_them():
    config = CONFIG["sphinx"]["config"]
    assert config.get("bibtex_cite_id") == workbook.CITE_ID       # not docutils' moving "id46"
    assert "{key}" in workbook.CITE_ID and "{bibliography_count}" not in workbook.CITE_ID
    # One bibliography, on the page the workbook links to: with a second one, "cite-{key}" would
    # name two entries alike (sphinxcontrib-bibtex then warns and drops the id).
    pages = [p for p in [*BOOK.glob("*.md"), *BOOK.glob("*.ipynb")]
             if re.search(r"^\s*```\{bibliography\}", p.read_text(encoding="utf-8"), re.M)]
    assert [p.name for p in pages] == [f"{workbook.BIBLIOGRAPHY_PAGE}.md"]
    assert f"book/{workbook.BIBLIOGRAPHY_PAGE}" in (ROOT / "_toc.yml").read_text(encoding="utf-8")


def test_every_entry_gets_its_own_id_and_the_workbook_computes_it_as_docutils_does():
    keys = _keys()
    assert len(keys) > 50
    ids = [workbook.cite_anchor(k) for k in keys]
    assert len(set(ids)) == len(keys)                              # no two entries alike
    assert set(ids) == _defined_ids()
    for text in [*keys, "cite-Triton_PR:9295", "cite-2024.x", "cite-Ünïcode  key", "12-ab-"]:
        assert workbook._make_id(text) == make_id(text), text


def test_every_citation_of_the_workbook_links_to_an_entry_the_bibliography_defines():
    index = build_index(BOOK)
    refs = index.page_url(workbook.BIBLIOGRAPHY_PAGE)
    defined = _defined_ids()
    cited = links = 0
    for path in CHAPTERS:
        nb = json.loads(path.read_text(encoding="utf-8"))
        # what the book cites: the keys of the {cite} roles of its prose and figure captions
        for cell in nb["cells"]:
            caption = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption")
            text = _text(cell) if cell["cell_type"] == "markdown" else str(caption or "")

            for keys in _cited(text):
                assert set(keys) <= set(index.citations), (path.name, keys)
                cited += len(keys)
        copy = workbook.learner_copy(nb, path.name, index)
        for cell in copy["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for m in _LINK.finditer(_text(cell)):
                url = m.group("url")
                if not url.startswith(refs):
                    continue
                page, _, anchor = url.partition("#")
                assert page == refs and anchor, (path.name, url)     # the page, at an entry
                assert anchor in defined, (path.name, url)
                links += 1
    assert cited > 100
    assert links == cited            # every cited key is a link to its entry, none left bare


def test_the_built_bibliography_defines_the_ids_the_workbook_links_to():
    """Against the built book's bibliography page, where one is built (``make book``); the unit
    tests run before the book is built (``make test``), so a missing page or one built before
    ``bibtex_cite_id`` was set is skipped; the tests above need no build."""
    page = ROOT / "_build" / "html" / "book" / f"{workbook.BIBLIOGRAPHY_PAGE}.html"
    if not page.is_file():
        pytest.skip("no built book in _build/html")
    html = page.read_text(encoding="utf-8")
    ids = set(re.findall(r'<div class="citation" id="([^"]+)"', html))
    if not any(i.startswith("cite-") for i in ids):
        pytest.skip("the built book predates bibtex_cite_id: rebuild it (make book)")
    assert ids == _defined_ids()
