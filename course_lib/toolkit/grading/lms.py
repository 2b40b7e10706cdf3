"""What an LMS hands the instructor: its download folders' names, and its submission times.

**Names.** ``--lms moodle``: Moodle's "Download all submissions" makes one folder per learner,
``Full Name_12345_assignsubmission_file_`` (12345: the participant id); ``--lms canvas``:
Canvas's "Download Submissions" makes flat files ``name_12345_67890_file.ipynb`` (``name``: the
learner's sortable name without spaces, 12345: the Canvas user id, 67890: the attachment id;
``name_LATE_12345_67890_file.ipynb`` when Canvas saw it late). :func:`lms_learner` maps such a
name to the number (Moodle's participant id, Canvas's user id: the ``ID`` column of a Canvas
gradebook export), the learner id in the gradebook; a name that does not match is kept as is.

**Times.** A notebook's file time says when it was last copied, not when it was handed in
(unzip, cp and a restore set it). :func:`read_times` reads the LMS's own record: a CSV with a
learner column and a submission-time column, recognised by their headers:

* Moodle's grading worksheet (*Assignment → Download grading worksheet*): ``Identifier``
  (``Participant 12345``) and ``Last modified (submission)`` (``Tuesday, 1 December 2026, 11:59
  PM``, in the time zone given with ``--times-zone``, as Moodle writes the instructor's local
  time without an offset; ``-`` when nothing was handed in);
* any CSV with ``learner`` and ``submitted_at`` (ISO 8601 with an offset), for other LMSs
  (Canvas's submission times come from its API: ``submitted_at``, ISO 8601).

Without an LMS record, file times are used and :func:`file_time_warning` says when they look
copied or restored; ``--no-late`` charges no lateness at all.

**Back to the LMS.** :func:`canvas_import` fills an assignment's column of Canvas's gradebook
export from a gradebook's totals (Moodle imports ``gradebook.csv`` as it is: docs/grading.md).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Sequence
from pathlib import Path

MOODLE_FOLDER = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_[a-z]+_?$")
CANVAS_FILE = re.compile(r"^(?P<name>[^_]+)(?:_LATE)?_(?P<id>\d+)_(?P<attachment>\d+)_"
                         r"(?P<file>.+)$", re.IGNORECASE)
LMS_NAMES = ("moodle", "canvas")


def lms_learner(name: str, lms: str) -> str | None:
    """The learner id in an LMS download's file or folder ``name`` (see the module docstring),
    or ``None`` when it does not follow ``lms``'s pattern."""
    if lms == "moodle":
        m = MOODLE_FOLDER.match(name)
    elif lms == "canvas":
        m = CANVAS_FILE.match(Path(name).name)
    else:
        raise ValueError(f"--lms must be one of {', '.join(LMS_NAMES)}, not {lms!r}")
    return m.group("id") if m else None


class TimesError(ValueError):
    """A submission-times file that cannot be read (the message names the file and line)."""


_MOODLE_TIME = "%A, %d %B %Y, %I:%M %p"


def _moodle_time(text: str, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime.strptime(text.strip(), _MOODLE_TIME).replace(tzinfo=zone)


def read_times(path: str | Path, zone: dt.tzinfo | None = None) -> dict[str, dt.datetime]:
    """``{learner id: submitted at}`` from an LMS's CSV (see the module docstring); ``zone``:
    the time zone of Moodle's times (required for a Moodle worksheet)."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    head = set(rows[0])
    out: dict[str, dt.datetime] = {}
    if {"Identifier", "Last modified (submission)"} <= head:
        if zone is None:
            raise TimesError(f"{path}: Moodle's worksheet has local times without an offset: "
                             "give their time zone (--times-zone Europe/Berlin)")
        for n, row in enumerate(rows, start=2):
            when = (row["Last modified (submission)"] or "").strip()
            ident = re.sub(r"^\D*", "", row["Identifier"] or "")
            if not ident or when in ("", "-"):
                continue
            try:
                out[ident] = _moodle_time(when, zone)
            except ValueError:
                raise TimesError(f"{path}, line {n}: {when!r} is not Moodle's time format "
                                 "('Tuesday, 1 December 2026, 11:59 PM')") from None
        return out
    if {"learner", "submitted_at"} <= head:
        for n, row in enumerate(rows, start=2):
            when = (row["submitted_at"] or "").strip()
            if not when:
                continue
            try:
                t = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
            except ValueError:
                raise TimesError(f"{path}, line {n}: {when!r} is not an ISO 8601 time") from None
            if t.tzinfo is None:
                raise TimesError(f"{path}, line {n}: {when!r} has no time zone offset")
            out[row["learner"]] = t
        return out
    raise TimesError(f"{path}: no known columns (Moodle's 'Identifier' and 'Last modified "
                     f"(submission)', or 'learner' and 'submitted_at'); found {sorted(head)}")


def file_time_warning(times: Sequence[dt.datetime], deadline: dt.datetime | None,
                      opened: dt.datetime | None = None) -> str | None:
    """Why file times look copied or restored rather than handed in, or ``None``: all within
    a few seconds of each other, all after the deadline, or older than the assignment."""
    if len(times) < 2:
        return None
    if max(times) - min(times) < dt.timedelta(seconds=10):
        return (f"all {len(times)} notebooks' file times are within 10 s of each other: they "
                "look copied, not handed in")
    if deadline is not None and min(times) > deadline:
        return "every notebook's file time is after the deadline: they look copied after it"
    if opened is not None and min(times) < opened:
        return "some file times are older than the assignment: they look restored"
    return None


def canvas_import(export: str | Path, gradebook: str | Path, column: str,
                  match: str = "SIS Login ID") -> str:
    """Canvas's gradebook export (*Grades → Export*) with the assignment's ``column`` (its full
    header, or the start of it: ``Week 3``) filled from ``gradebook``'s ``total``, matching the
    export's ``match`` column (``SIS Login ID``, or ``ID`` after ``--lms canvas``) to
    ``learner``; the CSV text to import (*Grades → Import*). Canvas's own rows (*Points
    Possible*) and learners without a gradebook row are kept as exported."""
    with Path(export).open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows or match not in rows[0]:
        raise ValueError(f"{export}: not a Canvas gradebook export (no {match!r} column)")
    head = rows[0]
    found = [i for i, h in enumerate(head) if h == column] or \
        [i for i, h in enumerate(head) if h.startswith(column)]
    if len(found) != 1:
        raise ValueError(f"{export}: {len(found)} columns match {column!r} (give the full "
                         "header, e.g. 'Week 3: softmax and self-attention (1234)')")
    target, key = found[0], head.index(match)
    with Path(gradebook).open(newline="", encoding="utf-8") as f:
        totals = {r["learner"]: r["total"] for r in csv.DictReader(f)}
    for row in rows[1:]:
        if len(row) > max(target, key) and row[key] in totals:
            row[target] = totals[row[key]]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def moodle_feedback_zip(feedback: dict[str, str], folders: dict[str, str], out: str | Path
                        ) -> list[str]:
    """Moodle's bulk feedback upload (*View all submissions → Upload multiple feedback files in
    a zip*): each learner's feedback as ``feedback.md`` in their download folder
    (``Full Name_12345_assignsubmission_file_/feedback.md``, the layout Moodle's
    ``assignfeedback_file_zip_importer`` reads back: full name, participant id, plugin type and
    name, then the file). ``feedback``: ``{learner id: Markdown}``; ``folders``: ``{learner id:
    the Moodle folder it came from}``. Returns the learners left out (no Moodle folder)."""
    import zipfile

    left = sorted(x for x in feedback if x not in folders)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for learner in sorted(x for x in feedback if x in folders):
            folder = folders[learner].rstrip("/")
            if not MOODLE_FOLDER.match(folder):
                left.append(learner)
                continue
            info = zipfile.ZipInfo(f"{folder}/feedback.md", date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, feedback[learner])
    return sorted(left)
