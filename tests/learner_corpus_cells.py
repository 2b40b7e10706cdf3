"""What every learner corpus of tests/ shares: a submission, and how a notebook cell defines it.

A corpus module (``learner_corpus_blind*.py``) holds ``CORPUS``, a list of :class:`Submission`
built with :func:`_s`, and ``load(index)``, which is :func:`load_from` of its own list.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

#: names a submission's source may use without importing them (chapter notebooks import them)
NAMESPACE_NAMES = ("torch", "math", "F", "masks", "merge")


@dataclass(frozen=True)
class Submission:
    exercise: str      # exercise id, also the name of the function the source defines
    label: str         # what the learner got wrong (or what is special about a right one)
    right: bool
    source: str


def _s(exercise: str, label: str, right: bool, source: str) -> Submission:
    return Submission(exercise, label, right, source.strip("\n") + "\n")


def namespace() -> dict:
    """The names a chapter notebook has imported when the learner writes the cell."""
    import math

    import torch
    import torch.nn.functional as F

    from course_lib import masks
    from course_lib.attention import merge

    return {"torch": torch, "math": math, "F": F, "masks": masks, "merge": merge,
            "__name__": "__main__"}


def load_from(corpus: list[Submission], index: int):
    """The learner's function of ``corpus[index]``, defined as a notebook cell defines it.

    The source is registered in :mod:`linecache` under a cell-like file name, so tracebacks and
    ``inspect.getsource`` see it as they see a notebook cell's.
    """
    sub = corpus[index]
    filename = f"<blind-corpus-cell-{index}>"
    lines = sub.source.splitlines(keepends=True)
    linecache.cache[filename] = (len(sub.source), None, lines, filename)
    ns = namespace()
    exec(compile(sub.source, filename, "exec"), ns)
    return ns[sub.exercise]
