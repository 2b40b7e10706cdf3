"""The command line of a chapter's own benchmark: run it over lengths, write its JSON table.

    def main(argv=None) -> None:
        script.run_and_write(run, __doc__, DEFAULT_OUT, DEFAULT_LENGTHS, argv)

``run(lengths, repeats) -> dict`` measures; the dict is written, indented, to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def run_and_write(run: Callable[[list[int], int], dict[str, Any]], doc: str | None,
                  default_out: Path, default_lengths: Sequence[int],
                  argv: Sequence[str] | None = None) -> Path:
    """Parse ``--out``, ``--lengths`` and ``--repeats``; run; write the table; return its path."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--out", type=Path, default=default_out)
    p.add_argument("--lengths", type=int, nargs="+", default=list(default_lengths))
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    data = run(args.lengths, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return args.out
