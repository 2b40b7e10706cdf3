"""What an LMS hands the instructor (issue 53, and issue 52's "times an instructor can trust"):
download names to learner ids, submission times from the LMS's record, a warning on copied file
times. No notebook is graded here."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from course_lib.toolkit.grading import lms

ROOT = Path(__file__).resolve().parent.parent
UTC = dt.timezone.utc


@pytest.mark.parametrize("name, kind, want", [
    ("Ada Lovelace_12345_assignsubmission_file_", "moodle", "12345"),
    ("José María_7_assignsubmission_file", "moodle", "7"),
    ("lovelaceada_12345_67890_03_softmax.ipynb", "canvas", "12345"),
    ("lovelaceada_LATE_12345_67891_03_softmax-1.ipynb", "canvas", "12345"),
    ("alice", "moodle", None), ("alice.ipynb", "canvas", None),
    ("Ada_12345_onlinetext_", "moodle", None),
])
def test_lms_download_names_map_to_learner_ids(name, kind, want):
    assert lms.lms_learner(name, kind) == want
    with pytest.raises(ValueError, match="must be one of"):
        lms.lms_learner(name, "blackboard")


def test_moodle_worksheet_times_in_the_given_zone():
    times = lms.read_times(ROOT / "docs" / "grading" / "moodle_worksheet.csv",
                           ZoneInfo("Europe/Berlin"))
    assert times == {"12345": dt.datetime(2026, 12, 1, 22, 41, tzinfo=UTC),
                     "12346": dt.datetime(2026, 12, 3, 7, 15, tzinfo=UTC)}   # 12347: none
    with pytest.raises(lms.TimesError, match="time zone"):
        lms.read_times(ROOT / "docs" / "grading" / "moodle_worksheet.csv")


def test_generic_times_need_an_offset(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("learner,submitted_at\nalice,2026-12-01T23:00:00Z\nbob,\n")
    assert lms.read_times(good) == {"alice": dt.datetime(2026, 12, 1, 23, tzinfo=UTC)}
    bad = tmp_path / "b.csv"
    bad.write_text("learner,submitted_at\nalice,2026-12-01T23:00:00\n")
    with pytest.raises(lms.TimesError, match="line 2.*no time zone"):
        lms.read_times(bad)
    other = tmp_path / "o.csv"
    other.write_text("name,when\na,b\n")
    with pytest.raises(lms.TimesError, match="no known columns"):
        lms.read_times(other)


def test_file_times_that_look_copied_or_restored_are_named():
    deadline = dt.datetime(2026, 12, 1, 23, 59, tzinfo=UTC)
    t = dt.datetime(2026, 12, 1, 12, tzinfo=UTC)
    honest = [t, t + dt.timedelta(hours=3), t + dt.timedelta(hours=13)]
    assert lms.file_time_warning(honest, deadline) is None
    copied = [t + dt.timedelta(seconds=s) for s in (0, 1, 2)]
    assert "within 10 s" in lms.file_time_warning(copied, deadline)
    after = [deadline + dt.timedelta(hours=h) for h in (1, 2, 5)]
    assert "after the deadline" in lms.file_time_warning(after, deadline)
    assert "restored" in lms.file_time_warning(honest, deadline,
                                               opened=t + dt.timedelta(hours=1))


@pytest.mark.slow
def test_grade_takes_ids_from_canvas_names_and_times_from_the_record(tmp_path):
    """Two untouched workbooks (nothing to run: no sandbox, no check), as Canvas names them."""
    import json

    from course_lib.toolkit import grading, workbook
    from course_lib.toolkit.grading.assignment import Assignment, LatePolicy

    nb = workbook.learner_copy(json.loads((ROOT / "book" / "03_softmax.ipynb").read_text()),
                               "03_softmax")
    subs = tmp_path / "download"
    subs.mkdir()
    for name in ("lovelaceada_12345_1_03_softmax.ipynb", "turingalan_12346_2_03_softmax.ipynb"):
        (subs / name).write_text(json.dumps(nb))
    deadline = dt.datetime(2026, 12, 1, 23, 59, tzinfo=UTC)
    task = Assignment(points={"softmax": 1.0, "self_attention": 1.0}, deadline=deadline,
                      late=LatePolicy(per_day=0.1, max_days=5))
    record = tmp_path / "times.csv"
    record.write_text("learner,submitted_at\n12345,2026-12-01T20:00:00Z\n"
                      "12346,2026-12-03T11:59:00Z\n")
    common = dict(jobs=1, seed=1, progress=False, sandboxed=False, run="functions",
                  assignment=task, lms="canvas")
    run = grading.grade(sorted(subs.iterdir()), tmp_path / "a.csv", times=record, **common)
    rows = (tmp_path / "a.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["12345", "12346"]
    assert rows[1].split(",")[3] == "0" and rows[2].split(",")[3] == "1.5"
    assert "Submission times: from the LMS's record (times.csv)" in run.summary
    assert "WARNING" not in run.summary
    # The files were just written, within seconds: their times look copied, and the summary
    # says so loudly; --no-late charges nothing.
    copied = grading.grade(sorted(subs.iterdir()), tmp_path / "b.csv", **common)
    assert "from the notebooks' file times" in copied.summary
    assert "WARNING: all 2 notebooks' file times are within 10 s" in copied.summary
    none = grading.grade(sorted(subs.iterdir()), tmp_path / "c.csv", no_late=True, **common)
    assert "not used (--no-late)" in none.summary and "WARNING" not in none.summary
    assert all(r.split(",")[3] == "0" for r in (tmp_path / "c.csv").read_text().splitlines()[1:])


def test_canvas_import_fills_the_assignment_column_of_canvas_export(tmp_path):
    """Canvas's export with the column empty, filled from the documented gradebook sample,
    gives the documented import file byte for byte."""
    docs = ROOT / "docs" / "grading"
    lines = (docs / "canvas_import.csv").read_text().splitlines()
    export = tmp_path / "export.csv"
    export.write_text("\n".join(lines[:2] + [x.rsplit(",", 1)[0] + "," for x in lines[2:]])
                      + "\n")
    text = lms.canvas_import(export, docs / "moodle_import.csv", "Week 3")
    assert text == (docs / "canvas_import.csv").read_text()
    with pytest.raises(ValueError, match="0 columns match"):
        lms.canvas_import(export, docs / "moodle_import.csv", "Week 9")


def _moodle_importer_accepts(path: str, participants: set[str]) -> tuple[str, str] | None:
    """Moodle's assignfeedback_file_zip_importer::is_valid_filename_for_import (Moodle 4.x,
    mod/assign/feedback/file/importziplib.php), ported: ``(participant id, file name)`` or
    ``None``. Each path part is split on ``_`` into at most 5; a part whose second field is a
    known numeric participant and whose third and fourth name a plugin starts the file name."""
    if path.rsplit("/", 1)[-1].startswith((".", "~")):
        return None
    parts = path.split("/")
    while parts:
        info = parts.pop(0).split("_", 4)
        if len(info) < 4 or not info[1].isdigit() or info[1] not in participants:
            continue
        if (info[2], info[3]) not in {("assignsubmission", "file"),
                                      ("assignfeedback", "file")}:
            continue
        return info[1], "/".join(([info[4]] if len(info) == 5 else [""]) + parts)
    return None


def test_moodle_feedback_zip_is_what_moodles_importer_reads(tmp_path):
    import zipfile

    # The published test's own cases of the importer, through the port, first.
    assert _moodle_importer_accepts("Student Name_5_assignsubmission_file_My_cool_filename.txt",
                                    {"5"}) == ("5", "My_cool_filename.txt")
    nested = "some_path_here/Student Name_5_assignsubmission_file_/some_path/My File.txt"
    assert _moodle_importer_accepts(nested, {"5"}) == ("5", "/some_path/My File.txt")
    assert _moodle_importer_accepts("Student Name_StringID_assignsubmission_file_x.txt",
                                    {"5"}) is None
    folders = {"12345": "Ada Lovelace_12345_assignsubmission_file_",
               "12346": "Alan Turing_12346_assignsubmission_file_"}
    left = lms.moodle_feedback_zip({"12345": "# Ada", "12346": "# Alan", "x": "# ?"}, folders,
                                   tmp_path / "feedback.zip")
    assert left == ["x"]
    with zipfile.ZipFile(tmp_path / "feedback.zip") as z:
        names = z.namelist()
        assert z.read(names[0]) == b"# Ada"
    assert [_moodle_importer_accepts(n, {"12345", "12346"}) for n in names] == [
        ("12345", "/feedback.md"), ("12346", "/feedback.md")]


@pytest.mark.slow
def test_grade_with_moodle_folders_writes_the_bulk_feedback_zip(tmp_path):
    import json
    import zipfile

    from course_lib.toolkit import grading, workbook

    nb = workbook.learner_copy(json.loads((ROOT / "book" / "03_softmax.ipynb").read_text()),
                               "03_softmax")
    folder = tmp_path / "Ada Lovelace_12345_assignsubmission_file_"
    folder.mkdir()
    (folder / "03_softmax.ipynb").write_text(json.dumps(nb))
    grading.grade([folder], tmp_path / "g.csv", feedback=tmp_path / "fb", jobs=1, seed=1,
                  progress=False, sandboxed=False, run="functions", lms="moodle")
    assert (tmp_path / "g.csv").read_text().splitlines()[1].startswith("12345,")
    with zipfile.ZipFile(tmp_path / "fb" / "moodle_feedback.zip") as z:
        assert z.namelist() == [f"{folder.name}/feedback.md"]
        assert z.read(z.namelist()[0]).decode() == (tmp_path / "fb" / "12345.md").read_text()
    assert _moodle_importer_accepts(f"{folder.name}/feedback.md", {"12345"}) == \
        ("12345", "/feedback.md")
