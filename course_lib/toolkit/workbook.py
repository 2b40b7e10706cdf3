"""The learner's workbook: copies of the chapter notebooks to work in, without the solutions.

``python -m course_lib workbook DIR`` (``make lab`` writes ``workbook/``) turns each chapter
notebook ``NN_name.ipynb`` of the book into a learner copy:

* every cell tagged ``solution`` (the reference solution that follows each exercise) is removed;
  the starter cells (``def softmax(x, dim=-1): ...``) and the check cells stay;
* the outputs of the code cells in the "Exercises" section are cleared (a fresh check shows
  "Not attempted yet." until the learner writes code);
* the test scaffolding goes: the first-line comments that tell nbval why a cell's output is not
  compared are dropped ("# output not compared by nbval ...") or keep only what a reader needs
  ("# machine-dependent: live timings of this CPU"; :func:`for_readers`, which the HTML book
  applies too; the ``nbval-ignore-output`` tag keeps the fact), and stored widget views, which
  no kernel backs after a reload, become the explorer's line "Run this cell to show the live
  explorer.";
* the Markdown reads like the book in JupyterLab with ``jupyterlab-myst`` (installed by
  ``make lab``), which renders admonitions, dropdowns, section labels ``(sec-x)=``, numbered
  ``{math}`` and ``{eq}``/``{ref}``/``{numref}`` references within the notebook. The writer
  converts what it cannot know in a lone notebook (:func:`markdown_for_lab`): labelled display
  equations get the book's numbers ("(8.4)"), citations become "Dao et al. (2022)" linked to
  their entry of the book's bibliography (``references.html#cite-KEY``), glossary terms links
  to the book's glossary, other chapters and their equations links to the learner's own copies
  beside this one ("08_flash.ipynb"), figure numbers the book's "Fig. 1.2";
* each figure keeps its caption and number: a Markdown cell after the figure's code cell says
  "**Fig. 1.2.** ..." as the book does.

Each copy records, in its metadata (``course_lib.workbook``), the SHA-256 of the cell sources it
was written with. A later run replaces a copy only while its cells are unchanged (a new version of
the book updates it); a copy the learner has edited is kept, with a message, unless ``force``.

Where the notebooks come from (``source``): the ``book/`` folder of the course repository, found
from the current directory or beside an editable install of ``course_lib``; a regular
(non-editable) install does not ship the notebooks, so pass ``--source`` (a clone's ``book/``) or
download the learner copy of a chapter from the book's page ("Download" -> "Workbook").
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_lib.toolkit.book_refs import DISPLAY_MATH, BookIndex, build_index, in_prose

SOLUTION_TAG = "solution"
CHAPTER_GLOB = "[0-9][0-9]_*.ipynb"
METADATA_KEY = "course_lib"
_DEFINES_SOLUTION = re.compile(r"^\s*def \w+_solution\s*\(", re.M)
_ROLE = re.compile(r"\{(?P<role>[a-z][\w:-]*)\}`(?P<text>[^`]+)`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)
# Test scaffolding the notebooks keep for nbval (README "Notebook outputs"): a first-line comment
# saying why a cell's output is not compared. Readers (the HTML book, the workbook) see
# :func:`for_readers`'s wording instead.
_NBVAL_COMMENT = re.compile(r"^# output not compared by nbval\b.*(\n|$)")
_MACHINE_DEPENDENT = re.compile(r"^# machine-dependent \(output not compared by nbval\)")


def for_readers(source: str) -> str:
    """A code cell's source as readers see it: the test-scaffolding first line for nbval goes
    ("# output not compared by nbval: widget model ids are new on every run"), and a
    machine-dependent cell keeps what matters to a reader, without nbval ("# machine-dependent:
    live timings of this CPU"). The cell's ``nbval-ignore-output`` tag keeps the fact for nbval."""
    return _MACHINE_DEPENDENT.sub("# machine-dependent", _NBVAL_COMMENT.sub("", source, count=1),
                                  count=1)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class WorkbookError(Exception):
    """No notebooks where they were looked for, or a notebook that would leak a solution."""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("course_lib")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------- finding the book


def find_source(source: str | Path | None = None) -> Path:
    """The folder holding the chapter notebooks (see the module's docstring)."""
    if source is not None:
        path = Path(source).expanduser()
        if not sorted(path.glob(CHAPTER_GLOB)):
            raise WorkbookError(f"no chapter notebooks (NN_name.ipynb) in {path}")
        return path
    candidates = [Path.cwd() / "book", Path(__file__).resolve().parents[2] / "book"]
    for path in candidates:
        if sorted(path.glob(CHAPTER_GLOB)):
            return path
    raise WorkbookError(
        "could not find the book's notebooks (looked in "
        + ", ".join(str(c) for c in candidates)
        + "): pass --source PATH/TO/book (the book/ folder of a clone of the course), or "
        "download a chapter's workbook from its page in the book")


# --------------------------------------------------------------------------- transforming


def _math_blocks(text: str, index: BookIndex, doc: str) -> str:
    """``$$ ... $$ (label)`` -> a ``{math}`` directive with the book's number as its enumerator
    (jupyterlab-myst shows "(8.4)" and resolves ``{eq}`label``` to it; it ignores the trailing
    "(label)" of dollar math and would number every equation 1, 2, ... of the notebook). An
    unlabelled equation stays unnumbered, as in the book."""
    def repl(m: re.Match[str]) -> str:
        indent, body, label = m.group("indent"), m.group("body"), m.group("label")
        target = index.targets.get(label or "")
        lines = [f"{indent}```{{math}}"]
        if label and target is not None and target.doc == doc:
            lines += [f"{indent}:label: {label}", f"{indent}:enumerator: {target.number}"]
        else:
            lines.append(f"{indent}:enumerated: false")
        lines += [ln if ln.startswith(indent) else indent + ln.lstrip()
                  for ln in body.split("\n")]
        lines.append(f"{indent}```")
        return "\n".join(lines)

    return DISPLAY_MATH.sub(repl, text)


def _anchor(label: str) -> str:
    """The HTML id Sphinx gives a label (docutils' make_id)."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _link(index: BookIndex, doc: str, anchor: str = "") -> str:
    """Where a reference to ``doc`` leads from a workbook notebook: another chapter is the
    learner's own copy beside it (``08_flash.ipynb``, which JupyterLab opens in a tab; a label
    of the book's HTML means nothing there, so no anchor); a page that is not a notebook of the
    workbook (the glossary, the bibliography) is the book's page."""
    if doc in index.chapters:
        return f"{doc}.ipynb"
    return index.page_url(doc, anchor)


# The book's bibliography: the page holding the ``{bibliography}`` directive, and the id it gives
# each entry. ``_config.yml`` sets ``bibtex_cite_id`` to this template (sphinxcontrib-bibtex
# formats it with the entry's key, then docutils' make_id turns it into the HTML id); without it
# the entries get docutils' "id46", which moves whenever an entry is added.
# tests/test_workbook_citations.py keeps the two the same.
BIBLIOGRAPHY_PAGE = "references"
CITE_ID = "cite-{key}"


def _make_id(text: str) -> str:
    """docutils' ``nodes.make_id``: lower case, runs of other characters as one "-", no leading
    digit or "-" and no trailing "-" (non-ASCII letters lose their accents)."""
    import unicodedata

    ascii_text = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    return re.sub(r"^[-0-9]+|-+$", "", re.sub(r"[^a-z0-9]+", "-", " ".join(ascii_text.split())))


def cite_anchor(key: str) -> str:
    """The HTML id of the bibliography entry ``key`` in the book ("cite-dao2022flashattention")."""
    return _make_id(CITE_ID.format(key=key))


def cite_url(key: str, index: BookIndex) -> str:
    """Where a citation of ``key`` leads from the workbook: its entry on the book's
    bibliography page."""
    return index.page_url(BIBLIOGRAPHY_PAGE, cite_anchor(key))


def _cite(keys: str, role: str, index: BookIndex) -> str:
    parts = []
    for key in (k.strip() for k in keys.split(",")):
        if key not in index.citations:
            parts.append(f"{key}")
            continue
        names, year = index.citations[key]
        url = cite_url(key, index)
        parts.append(f"[{names} ({year})]({url})" if role == "cite:t"
                     else f"[{names}, {year}]({url})")
    return "; ".join(parts) if role == "cite:t" else "(" + "; ".join(parts) + ")"


def _roles(text: str, index: BookIndex, doc: str) -> str:
    """What jupyterlab-myst cannot resolve in a lone notebook becomes Markdown: citations
    ("Dao et al. (2022)", linked to their entry of the book's bibliography), glossary terms and
    other chapters (links to the book's pages), figure and section numbers as the book prints
    them. References to equations and sections of the same notebook stay roles: jupyterlab-myst
    resolves them."""
    def repl(m: re.Match[str]) -> str:
        role, body = m.group("role"), m.group("text")
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>\s*$", body, re.S)
        shown = explicit.group("text").strip() if explicit else ""
        target = explicit.group("target").strip() if explicit else body.strip()
        if role.startswith("cite"):
            return _cite(target, role, index)
        if role == "term":
            term = target if explicit else body
            return f"[{shown or body}]({index.page_url('glossary', 'term-' + _anchor(term))})"
        if role == "doc":
            page = target.rsplit("/", 1)[-1]
            return f"[{shown or index.titles.get(page, page)}]({_link(index, page)})"
        known = index.targets.get(target)
        if known is None:
            return shown or target
        here = known.doc == doc
        if role == "eq":
            if here:
                return m.group(0)
            return f"[({known.number})]({_link(index, known.doc, 'equation-' + _anchor(target))})"
        name = {"fig": "Fig.", "sec": "Section", "eq": "Eq."}[known.kind]
        if role == "numref":
            label = shown.replace("%s", known.number).replace("{number}", known.number) \
                if shown else f"{name} {known.number}"
        else:   # ref: the text given, else the section's title
            label = shown or known.title or f"{name} {known.number}"
        if here and known.kind == "sec":
            return f"[{label}](#{target})"
        if here:
            return label
        return f"[{label}]({_link(index, known.doc, _anchor(target))})"

    return _ROLE.sub(repl, text)


def markdown_for_lab(text: str, index: BookIndex, doc: str) -> str:
    """One markdown cell of the book as the learner's JupyterLab (with jupyterlab-myst) shows it
    like the book: see :func:`_math_blocks` and :func:`_roles`."""
    return in_prose(text, lambda prose: _roles(_math_blocks(prose, index, doc), index, doc))


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _set_source(cell: dict[str, Any], text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def sources_sha256(nb: dict[str, Any]) -> str:
    """What the learner edits: cell types and sources, in order (outputs and metadata aside)."""
    data = [[c.get("cell_type"), _source(c)] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(data, ensure_ascii=False).encode("utf-8")).hexdigest()


def _fallback_output() -> dict[str, Any]:
    from course_lib.toolkit.explorer import LIVE_FALLBACK

    return {"output_type": "display_data", "metadata": {}, "data": {"text/plain": LIVE_FALLBACK}}


def _code_cell(cell: dict[str, Any]) -> None:
    """Word the nbval first-line comment for readers (:func:`for_readers`) and replace stored
    widget views, dead without their kernel, by the explorer's "run this cell" line."""
    text = _source(cell)
    stripped = for_readers(text)
    if stripped != text:
        _set_source(cell, stripped)
    outputs = cell.get("outputs", [])
    if any(WIDGET_VIEW in o.get("data", {}) for o in outputs):
        cell["outputs"] = [_fallback_output() if WIDGET_VIEW in o.get("data", {}) else o
                           for o in outputs]


def _caption_cell(cell: dict[str, Any], index: BookIndex, doc: str) -> dict[str, Any] | None:
    """The book's caption of a figure cell (``mystnb: figure: {caption, name}``), numbered as the
    book numbers it ("**Fig. 1.2.** The weight of each book ..."), as a Markdown cell to follow
    the figure: the prose's "Fig. 1.2 shows" then points at a figure that says it is Fig. 1.2."""
    figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
    caption = str(figure.get("caption", "")).strip()
    if not caption:
        return None
    target = index.targets.get(str(figure.get("name", "")))
    number = f"Fig. {target.number}." if target is not None and target.kind == "fig" else ""
    text = markdown_for_lab(f"**{number}** {caption}" if number else caption, index, doc)
    out: dict[str, Any] = {"cell_type": "markdown", "metadata": {METADATA_KEY: {"caption": True}},
                           "source": text.splitlines(keepends=True)}
    if "id" in cell:
        out["id"] = f"{cell['id']}-caption"[:64]
    return out


def _default_index() -> BookIndex:
    try:
        return build_index(find_source())
    except WorkbookError:
        return BookIndex()


def learner_copy(nb: dict[str, Any], name: str = "",
                 index: BookIndex | None = None) -> dict[str, Any]:
    """The learner's copy of one chapter notebook (the input is not modified). ``index``: the
    book's numbering (:func:`course_lib.toolkit.book_refs.build_index`); by default that of the
    book found by :func:`find_source`."""
    nb = copy.deepcopy(nb)
    index = index if index is not None else _default_index()
    doc = Path(name).stem
    cells = []
    in_exercises = False
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        if SOLUTION_TAG in tags:
            continue
        if cell.get("cell_type") == "markdown":
            text = _source(cell)
            for level, title in _HEADING.findall(text):
                if len(level) <= 2:
                    title = re.sub(r"^[\d.]+\s+", "", title.strip()).lower()
                    in_exercises = title.startswith("exercise")   # "Exercises", "1.8 Exercise: x"
            new = markdown_for_lab(text, index, doc)
            if new != text:
                _set_source(cell, new)
        elif cell.get("cell_type") == "code":
            if _DEFINES_SOLUTION.search(_source(cell)):
                raise WorkbookError(
                    f"{name or 'a notebook'}: a cell defines a *_solution function but is not "
                    f"tagged {SOLUTION_TAG!r}; tag it so the workbook leaves it out")
            cell.get("metadata", {}).pop("execution", None)
            _code_cell(cell)
            if in_exercises:
                cell["outputs"] = []
                cell["execution_count"] = None
            caption = _caption_cell(cell, index, doc)
            if caption is not None:
                cells += [cell, caption]
                continue
        cells.append(cell)
    nb["cells"] = cells
    nb.setdefault("metadata", {})[METADATA_KEY] = {"workbook": {
        "chapter": name, "course_lib": _version(), "sources_sha256": sources_sha256(nb)}}
    return nb


def dumps(nb: dict[str, Any]) -> str:
    """The notebook as Jupyter writes it (nbformat's layout)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- writing


@dataclass
class Report:
    written: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    dest: Path = Path(".")

    def lines(self) -> list[str]:
        out = []
        for name in self.kept:
            out.append(f"kept {name}: you have edited it (run with --force to replace it with a "
                       "fresh copy)")
        n = len(self.written) + len(self.updated)
        out.append(f"Workbook in {self.dest}: {len(self.written)} written, {len(self.updated)} "
                   f"updated, {len(self.unchanged)} unchanged, {len(self.kept)} kept as edited."
                   if n or self.unchanged or self.kept else f"Workbook in {self.dest}: empty.")
        return out


def _edited(existing: dict[str, Any]) -> bool:
    meta = existing.get("metadata", {}).get(METADATA_KEY, {}).get("workbook", {})
    return meta.get("sources_sha256") != sources_sha256(existing)


def write_workbook(dest: str | Path, source: str | Path | None = None, *,
                   force: bool = False) -> Report:
    """Write the learner copy of every chapter of ``source`` into ``dest`` (see the module)."""
    src = find_source(source)
    dest = Path(dest).expanduser()
    if dest.resolve() == src.resolve():
        raise WorkbookError("the workbook must not be written over the book's own notebooks")
    dest.mkdir(parents=True, exist_ok=True)
    report = Report(dest=dest)
    index = build_index(src)
    for path in sorted(src.glob(CHAPTER_GLOB)):
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = dumps(learner_copy(nb, path.name, index))
        target = dest / path.name
        if target.exists():
            current = target.read_text(encoding="utf-8")
            try:
                existing = json.loads(current)
                edited = _edited(existing)
                same = sources_sha256(existing) == sources_sha256(json.loads(text))
            except Exception:
                edited, same = True, False
            if current == text or (same and not edited and not force):
                report.unchanged.append(path.name)   # outputs of the learner's runs are kept
                continue
            if edited and not force:
                report.kept.append(path.name)
                continue
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
            report.updated.append(path.name)
        else:
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
            report.written.append(path.name)
    return report
