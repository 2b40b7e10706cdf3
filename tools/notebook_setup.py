"""Make every chapter notebook runnable where it is launched, and keep its solutions out of the
learner's progress (an authoring tool; run it after a version bump or a new chapter).

Three edits, all idempotent:

1. **A setup cell first** (tags ``setup``, ``remove-cell``: not shown in the HTML book). It installs
   ``course_lib`` of this book's version, from the repository's ``v<version>`` tag, only when it is
   not importable (Colab, a bare Jupyter, a downloaded workbook). In the book build, nbval,
   ``make lab``, Binder and any clone with ``pip install -e .`` it does nothing and prints nothing.
   ``COURSE_LIB_REQUIREMENT`` overrides what it installs (a course mirror, a local wheel).
2. **Solution cells do not record**: in cells tagged ``solution``, ``exercises.check(ID, FN)``
   becomes ``exercises.check(ID, FN, record=False)`` (the output is the same).
3. **Solutions fold whole in the book**: a solution cell is tagged ``hide-cell`` (not
   ``hide-input``), so its "✓ Correct!" output folds with the code, behind a toggle labelled
   "Reference solution" (MyST-NB's cell-level ``code_prompt_show``): an unsolved exercise never
   shows a tick next to "Not attempted yet".

The cell text is built from ``pyproject.toml`` (``version``) and ``_config.yml``
(``repository.url``), so it follows both. Notebooks are rewritten textually in the layout they are
stored in (outputs, execution counts and all other cells untouched).

Usage::

    python tools/notebook_setup.py book/*.ipynb          # apply
    python tools/notebook_setup.py --check book/*.ipynb  # exit 1 if a notebook is not up to date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "setup"
SOLUTION_TAG = "solution"

SETUP_TEMPLATE = '''\
# Setup: does nothing where course_lib is installed (the book, `make lab`, Binder, a clone).
# On Colab or a bare Jupyter it installs the course_lib of this book, version {version}.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("course_lib") is None:
    requirement = os.environ.get("COURSE_LIB_REQUIREMENT",
                                 "{requirement}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement], check=True)
    importlib.invalidate_caches()'''

#: MyST-NB cell metadata of a solution cell: the toggle's labels.
SOLUTION_PROMPTS = {"code_prompt_show": "Reference solution",
                    "code_prompt_hide": "Hide the reference solution"}

_CHECK = re.compile(r"exercises\.check\((\"[^\"]+\"),\s*(\w+)\)")


def book_version(root: Path = ROOT) -> str:
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        raise SystemExit("pyproject.toml has no version")
    return m.group(1)


def repository_url(root: Path = ROOT) -> str:
    text = (root / "_config.yml").read_text(encoding="utf-8")
    m = re.search(r"^repository:\s*\n(?:[ \t]+.*\n)*?[ \t]+url:\s*(\S+)", text, re.M)
    if not m:
        raise SystemExit("_config.yml has no repository.url")
    return m.group(1).strip("\"'").rstrip("/")


def default_requirement(root: Path = ROOT) -> str:
    return f"course_lib @ git+{repository_url(root)}@v{book_version(root)}"


def setup_source(requirement: str, version: str) -> str:
    return SETUP_TEMPLATE.format(requirement=requirement, version=version)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def apply(nb: dict[str, Any], source: str) -> bool:
    """Insert or refresh the setup cell, mark solution checks; True if ``nb`` changed."""
    changed = False
    cells = nb.setdefault("cells", [])
    first = cells[0] if cells else None
    if first is not None and SETUP_TAG in first.get("metadata", {}).get("tags", []):
        if _source(first) != source:
            first["source"] = _lines(source)
            changed = True
    else:
        cell: dict[str, Any] = {"cell_type": "code", "execution_count": None,
                                "metadata": {"tags": [SETUP_TAG, "remove-cell"]},
                                "outputs": [], "source": _lines(source)}
        if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5:
            cell["id"] = "course-lib-setup"
        cells.insert(0, cell)
        changed = True
    for cell in cells:
        if SOLUTION_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        text = _source(cell)
        new = _CHECK.sub(r"exercises.check(\1, \2, record=False)", text)
        if new != text:
            cell["source"] = _lines(new)
            changed = True
        meta = cell["metadata"]
        tags = [t for t in meta["tags"] if t != "hide-input"]
        if "hide-cell" not in tags:
            tags.append("hide-cell")
        if tags != meta["tags"] or meta.get("mystnb") != SOLUTION_PROMPTS:
            meta["tags"], meta["mystnb"] = tags, dict(SOLUTION_PROMPTS)
            changed = True
    return changed


def dumps(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--requirement", help="what the setup cell installs (default: the "
                        "repository's v<version> tag)")
    args = parser.parse_args(argv)
    source = setup_source(args.requirement or default_requirement(), book_version())
    stale = []
    for path in args.notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if apply(nb, source):
            stale.append(path)
            if not args.check:
                path.write_text(dumps(nb), encoding="utf-8")
    verb = "would change" if args.check else "updated"
    for path in stale:
        print(f"{verb}: {path}")
    print(f"{len(stale)} of {len(args.notebooks)} notebooks {verb}.")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
