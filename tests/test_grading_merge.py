"""The course-wide gradebook (issue 53): assignments' gradebooks merged, a column each and a
total; written by hand as grade writes them (a roster's name column, notes with commas)."""

from __future__ import annotations

import csv

import pytest

from course_lib.toolkit.grading import merge


def test_merge_gives_a_column_per_assignment_and_a_total(tmp_path, capsys):
    (tmp_path / "w3.csv").write_text(
        "learner,name,softmax,self_attention,late_days,total,notes\n"
        "alice,Alice,2,3,0,5,alice.ipynb: checked\n"
        'bob,Bob,0,,1.5,0,"bob.ipynb: checked; late"\n'
        "zoe,Zoe,,,0,0,no submission\n")
    (tmp_path / "w6.csv").write_text(
        "learner,causal_mask,late_days,total,notes\n"
        "alice,1,0,1,alice.ipynb: checked\ncarl,0.5,0.2,0.45,carl.ipynb: checked\n")
    assert merge.main([f"week3={tmp_path / 'w3.csv'}", f"week6={tmp_path / 'w6.csv'}",
                       "--out", str(tmp_path / "course.csv")]) == 0
    assert "4 learners, 2 assignments" in capsys.readouterr().out
    rows = list(csv.reader((tmp_path / "course.csv").open(newline="")))
    assert rows == [["learner", "week3", "week6", "total"], ["alice", "5", "1", "6"],
                    ["bob", "0", "", "0"], ["carl", "", "0.45", "0.45"],
                    ["zoe", "0", "", "0"]]


def test_merge_refuses_what_is_not_a_gradebook(tmp_path, capsys):
    (tmp_path / "x.csv").write_text("id,score\na,1\n")
    assert merge.main([f"a={tmp_path / 'x.csv'}", "--out", str(tmp_path / "o.csv")]) == 2
    assert "not a gradebook" in capsys.readouterr().err and not (tmp_path / "o.csv").exists()
    with pytest.raises(SystemExit):
        merge.main(["no-equals-sign.csv", "--out", str(tmp_path / "o.csv")])
