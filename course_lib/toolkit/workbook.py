"""The learner's workbook: copies of the chapter notebooks to work in, without the solutions.

``python -m course_lib workbook DIR`` (``make lab`` writes ``workbook/``) turns each chapter
notebook ``NN_name.ipynb`` of the book into a learner copy:

* every cell tagged ``solution`` (the reference solution that follows each exercise) is removed;
  the starter cells (``def softmax(x, dim=-1): ...``) and the check cells stay;
* the outputs of the code cells in the "Exercises" section are cleared (a fresh check shows
  "Not attempted yet." until the learner writes code);
* the "Check yourself" answers, MyST ``{dropdown}`` fences in the book, become
  ``<details><summary>Answer</summary>...</details>`` blocks, which Jupyter shows folded; MyST
  roles that Jupyter cannot render (``{term}`x```, ``{eq}`label```, ``{cite}`key```...) become
  plain text.

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

SOLUTION_TAG = "solution"
CHAPTER_GLOB = "[0-9][0-9]_*.ipynb"
METADATA_KEY = "course_lib"
_DEFINES_SOLUTION = re.compile(r"^\s*def \w+_solution\s*\(", re.M)
_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,}|~{3,})\{dropdown\}[ \t]*(?P<title>.*)$")
_ROLE = re.compile(r"\{(?P<role>[a-z][\w:-]*)\}`(?P<text>[^`]+)`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)


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


def _dropdowns_to_details(text: str) -> str:
    """MyST ``{dropdown}`` fences -> ``<details>`` blocks (same indentation, so list items keep
    their answers)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        title = m.group("title").strip() or "Answer"
        j = i + 1
        while j < len(lines) and re.match(r"^\s*:[\w-]+:", lines[j]):   # directive options
            j += 1
        body: list[str] = []
        depth = 0   # nested fences inside the answer (with an info string, or shorter)
        while j < len(lines):
            stripped = lines[j].strip()
            if depth == 0 and stripped == fence:
                break
            if re.match(r"^(`{3,}|:{3,}|~{3,})\S", stripped):
                depth += 1
            elif depth and re.match(r"^(`{3,}|:{3,}|~{3,})$", stripped):
                depth -= 1
            body.append(lines[j])
            j += 1
        else:
            raise WorkbookError(f"unclosed {{dropdown}} fence: {lines[i].strip()!r}")
        out.append(f"{indent}<details><summary>{title}</summary>")
        out.append("")
        out.extend(body)
        out.append("")
        out.append(f"{indent}</details>")
        i = j + 1
    return "\n".join(out)


def _plain_roles(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        role, body = m.group("role"), m.group("text")
        label = re.sub(r"\s*<[^>]*>\s*$", "", body).strip() or body
        if role == "eq":
            return f"({label})"
        if role.startswith("cite"):
            return f"[{label}]"
        if role in ("doc", "ref", "numref"):
            return f"*{label}*"
        return label          # term, abbr, ...

    return _ROLE.sub(repl, text)


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _set_source(cell: dict[str, Any], text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def sources_sha256(nb: dict[str, Any]) -> str:
    """What the learner edits: cell types and sources, in order (outputs and metadata aside)."""
    data = [[c.get("cell_type"), _source(c)] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(data, ensure_ascii=False).encode("utf-8")).hexdigest()


def learner_copy(nb: dict[str, Any], name: str = "") -> dict[str, Any]:
    """The learner's copy of one chapter notebook (the input is not modified)."""
    nb = copy.deepcopy(nb)
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
            new = _plain_roles(_dropdowns_to_details(text))
            if new != text:
                _set_source(cell, new)
        elif cell.get("cell_type") == "code":
            if _DEFINES_SOLUTION.search(_source(cell)):
                raise WorkbookError(
                    f"{name or 'a notebook'}: a cell defines a *_solution function but is not "
                    f"tagged {SOLUTION_TAG!r}; tag it so the workbook leaves it out")
            cell.get("metadata", {}).pop("execution", None)
            if in_exercises:
                cell["outputs"] = []
                cell["execution_count"] = None
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
    for path in sorted(src.glob(CHAPTER_GLOB)):
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = dumps(learner_copy(nb, path.name))
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
