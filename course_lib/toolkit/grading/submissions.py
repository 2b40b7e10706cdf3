"""Who handed in what: learners and their notebooks, from the paths an instructor passes.

A path is a learner's notebook (``alice.ipynb``: learner ``alice``) or a learner's folder of
notebooks (``bob/03_softmax.ipynb``, ...: learner ``bob``). A notebook's metadata
``course_lib.learner`` (a string), if present, names the learner instead. Which chapter a notebook
is comes from the workbook's own metadata (``course_lib.workbook.chapter``), else from a file name
``NN_name.ipynb``, else from the exercise ids its check calls name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHAPTER_NAME = re.compile(r"^\d\d_\w+$")
_CHECK_CALL = re.compile(r"""check\(\s*["']([\w-]+)["']""")


class SubmissionError(ValueError):
    """Paths that name no notebook, or two submissions claiming one learner."""


@dataclass(frozen=True)
class Submission:
    learner: str
    notebook: Path


def _metadata_learner(path: Path) -> str | None:
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        name = meta.get("course_lib", {}).get("learner")
    except Exception:
        return None
    return name.strip() if isinstance(name, str) and name.strip() else None


def discover(paths: list[str | Path]) -> list[Submission]:
    """One :class:`Submission` per notebook, sorted by learner then file name."""
    found: list[Submission] = []
    owner: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            notebooks = sorted(p for p in path.rglob("*.ipynb")
                               if ".ipynb_checkpoints" not in p.parts)
            default = path.resolve().name
        elif path.suffix == ".ipynb" and path.is_file():
            notebooks, default = [path], path.stem
        else:
            raise SubmissionError(f"{raw}: not a notebook (.ipynb) or a folder of notebooks")
        for nb in notebooks:
            learner = _metadata_learner(nb) or default
            if learner in owner and owner[learner] != path:
                raise SubmissionError(f"learner {learner!r} has two submissions: "
                                      f"{owner[learner]} and {path}")
            owner[learner] = path
            found.append(Submission(learner, nb))
    return sorted(found, key=lambda s: (s.learner, s.notebook.name))


def chapter_of(nb: dict[str, Any], path: Path, chapter_of_exercise: dict[str, str]) -> str | None:
    """The chapter (``"03_softmax"``) a notebook belongs to, or ``None`` if nothing says."""
    meta = nb.get("metadata", {}).get("course_lib", {}).get("workbook", {})
    chapters = set(chapter_of_exercise.values())
    if isinstance(meta, dict) and meta.get("chapter") in chapters:
        return meta["chapter"]
    if _CHAPTER_NAME.match(path.stem) and path.stem in chapters:
        return path.stem
    named = []
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        text = "".join(src) if isinstance(src, list) else str(src)
        named += [chapter_of_exercise[i] for i in _CHECK_CALL.findall(text)
                  if i in chapter_of_exercise]
    return max(set(named), key=named.count) if named else None
