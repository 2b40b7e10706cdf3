"""The command line of a chapter's own benchmark: run it over lengths, write its JSON table.

    def main(argv=None) -> None:
        script.run_and_write(run, __doc__, DEFAULT_OUT, DEFAULT_LENGTHS, argv)

``run(lengths, repeats) -> dict`` measures; the dict is written, indented, to ``--out``. With
``devices`` the command also takes ``--device`` (first of ``devices`` by default), passed to
``run`` as ``device=``, and ``default_out`` may be a function of the device.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def run_and_write(run: Callable[..., dict[str, Any]], doc: str | None,
                  default_out: Path | Callable[[str], Path], default_lengths: Sequence[int],
                  argv: Sequence[str] | None = None, devices: Sequence[str] = ()) -> Path:
    """Parse ``--out``, ``--lengths``, ``--repeats`` (and ``--device`` when ``devices`` are
    given); run; write the table; return its path."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--lengths", type=int, nargs="+", default=list(default_lengths))
    p.add_argument("--repeats", type=int, default=3)
    if devices:
        p.add_argument("--device", choices=list(devices), default=devices[0])
    args = p.parse_args(argv)
    extra = {"device": args.device} if devices else {}
    out = args.out
    if out is None:
        out = default_out(args.device if devices else "cpu") if callable(default_out) \
            else default_out
    data = run(args.lengths, args.repeats, **extra)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return out
