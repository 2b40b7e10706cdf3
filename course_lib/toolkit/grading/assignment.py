"""An assignment: which exercises are graded, for how many points, by when, and for whom.

    # ASSIGNMENT.toml (or the same keys in .yml)
    title = "Week 3: softmax and self-attention"
    deadline = 2026-12-01T23:59:00Z          # optional; a submission's time is its file's mtime
    late = { per_day = 0.1, max_days = 5 }   # optional: 10% of the points off per day started
    roster = "roster.csv"                     # optional: columns id,name (relative to this file)

    [points]                                  # exercise id = points (only these are graded)
    softmax = 2
    self_attention = 3

``chapters = ["03_softmax"]`` instead of ``[points]`` grades every exercise of those chapters at
one point each. Unknown exercise ids and malformed values are refused with a message naming them.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .submissions import learner_id


class AssignmentError(ValueError):
    """The assignment file is malformed (the message says where)."""


@dataclass(frozen=True)
class LatePolicy:
    per_day: float = 0.0         # share of the points lost per day (started) after the deadline
    max_days: float = math.inf   # later than this many days: no points

    def factor(self, days_late: float) -> float:
        """The share of the points kept by a submission ``days_late`` days late."""
        if days_late <= 0:
            return 1.0
        if days_late > self.max_days:
            return 0.0
        return max(0.0, 1.0 - self.per_day * math.ceil(days_late))


@dataclass(frozen=True)
class Assignment:
    points: dict[str, float]                        # exercise id -> points, in course order
    title: str = ""
    deadline: dt.datetime | None = None
    late: LatePolicy = LatePolicy()
    roster: dict[str, str] | None = None            # learner id -> display name
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def possible(self) -> float:
        return float(sum(self.points.values()))

    def days_late(self, submitted: dt.datetime) -> float:
        if self.deadline is None:
            return 0.0
        return max(0.0, (submitted - self.deadline).total_seconds() / 86400)


def _read(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise AssignmentError(f"{path}: not valid TOML: {e}") from None
    if path.suffix in (".yml", ".yaml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise AssignmentError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise AssignmentError(f"{path}: expected a mapping of keys at the top level")
        return data
    raise AssignmentError(f"{path}: an assignment is a .toml or .yml file")


def _deadline(value: Any, path: Path) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise AssignmentError(f"{path}: deadline {value!r} is not an ISO date and time "
                                  "(e.g. 2026-12-01T23:59:00Z)") from None
    else:
        raise AssignmentError(f"{path}: deadline must be a date and time, got {value!r}")
    if moment.tzinfo is None:
        raise AssignmentError(f"{path}: deadline {value!s} has no time zone: add Z or +HH:MM")
    return moment


def _roster(value: Any, path: Path) -> dict[str, str] | None:
    if value is None:
        return None
    rows: list[dict[str, Any]]
    if isinstance(value, str):
        file = (path.parent / value)
        try:
            with file.open(newline="", encoding="utf-8-sig") as f:
                rows = list(csv.DictReader(f))
        except OSError as e:
            raise AssignmentError(f"{path}: roster {file} cannot be read: {e.strerror}") from None
    elif isinstance(value, list):
        rows = value
    else:
        raise AssignmentError(f"{path}: roster is a CSV file name or a list of {{id, name}}")
    roster: dict[str, str] = {}
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not str(row.get("id", "")).strip():
            raise AssignmentError(f"{path}: roster entry {i} has no id")
        lid = learner_id(str(row["id"]).strip())     # the one normalisation of file names
        if lid in roster:
            raise AssignmentError(f"{path}: roster lists {lid!r} twice")
        roster[lid] = str(row.get("name", lid)).strip() or lid
    return roster


def load(path: str | Path, chapter_of_exercise: dict[str, str]) -> Assignment:
    """Read and check an assignment file against the course's exercises (id -> chapter)."""
    path = Path(path)
    data = _read(path)
    known = set(chapter_of_exercise)
    points: dict[str, float] = {}
    if "points" in data:
        if not isinstance(data["points"], dict) or not data["points"]:
            raise AssignmentError(f"{path}: [points] must map exercise ids to points")
        unknown = sorted(set(map(str, data["points"])) - known)
        if unknown:
            raise AssignmentError(f"{path}: no such exercise: {', '.join(unknown)} (known: "
                                  f"{', '.join(chapter_of_exercise)})")
        for k, v in data["points"].items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 \
                    or not math.isfinite(v):
                raise AssignmentError(f"{path}: points for {k} must be a number >= 0, got {v!r}")
            points[str(k)] = float(v)
    if "chapters" in data:
        chapters = data["chapters"]
        if not isinstance(chapters, list):
            raise AssignmentError(f"{path}: chapters must be a list of chapter names")
        unknown = sorted(set(map(str, chapters)) - set(chapter_of_exercise.values()))
        if unknown:
            raise AssignmentError(f"{path}: no such chapter: {', '.join(unknown)}")
        for ex, chapter in chapter_of_exercise.items():
            if chapter in chapters:
                points.setdefault(ex, 1.0)
    if not points:
        raise AssignmentError(f"{path}: name the graded exercises ([points]) or chapters")
    late = data.get("late") or {}
    if not isinstance(late, dict):
        raise AssignmentError(f"{path}: late must be a table: {{ per_day = 0.1, max_days = 5 }}")
    try:
        policy = LatePolicy(float(late.get("per_day", 0.0)),
                            float(late.get("max_days", math.inf)))
    except (TypeError, ValueError):
        raise AssignmentError(f"{path}: late.per_day and late.max_days must be numbers") from None
    if not 0 <= policy.per_day <= 1 or policy.max_days < 0:
        raise AssignmentError(f"{path}: late.per_day must be in [0, 1], max_days >= 0")
    ordered = {e: points[e] for e in chapter_of_exercise if e in points}
    return Assignment(points=ordered, title=str(data.get("title", "")),
                      deadline=_deadline(data.get("deadline"), path), late=policy,
                      roster=_roster(data.get("roster"), path), source=str(path))
