"""references.bib parses, with no key twice, and every citation in the book has an entry."""

from __future__ import annotations

import re
from pathlib import Path

from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parent.parent


def test_bibliography_parses_and_covers_every_citation():
    keys = set(parse_file(str(ROOT / "references.bib"), "bibtex").entries)
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    starts = re.findall(r"^@\w+\{([^,]+),", text, flags=re.M)
    assert len(starts) == len(set(starts)) == len(keys)        # no entry lost or doubled
    cited = set()
    for path in sorted((ROOT / "book").glob("*.*")):
        if path.suffix in (".ipynb", ".md"):
            for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", path.read_text("utf-8")):
                cited.update(k.strip() for k in group.split(","))
    assert cited and cited <= keys, sorted(cited - keys)
