"""List the chapter notebooks changed since ``main``, for ``make check``'s quick nbval.

    python tools/changed_notebooks.py [BASE]     # BASE defaults to main (else origin/main)

Changed = differs between the merge-base of HEAD and BASE and the working tree (committed on this
branch, staged or not), plus untracked notebooks. Prints paths relative to ``book/``, one a line,
only notebooks that exist now; prints nothing (exit 0) when none changed. A note on stderr says
what it compared with, or why it could not (not a git checkout, no BASE): then nothing is listed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                             check=False)
    except FileNotFoundError:
        return None
    return res.stdout if res.returncode == 0 else None


def changed(base: str | None = None) -> tuple[list[str], str]:
    """(notebooks relative to book/, a note on what was compared)."""
    bases = [base] if base else ["main", "origin/main"]
    fork = next((mb.strip() for b in bases if (mb := git("merge-base", "HEAD", b))), None)
    if fork is None:
        return [], f"no merge-base with {' or '.join(bases)} (not a git checkout?)"
    names = set((git("diff", "--name-only", fork, "--", "book/*.ipynb") or "").split())
    names |= set((git("ls-files", "--others", "--exclude-standard", "--", "book/*.ipynb")
                  or "").split())
    found = sorted(n for n in names if (ROOT / n).is_file() and n.startswith("book/"))
    return [n.removeprefix("book/") for n in found], f"changed since {fork[:10]} ({bases[0]})"


def main(argv: list[str]) -> int:
    notebooks, note = changed(argv[0] if argv else None)
    print(f"changed notebooks: {len(notebooks)} {note}", file=sys.stderr)
    print("\n".join(notebooks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
