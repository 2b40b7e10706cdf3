"""course_lib.toolkit.display: the one markdown-table renderer, for records and matrices."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.toolkit.display import markdown_table, matrix_table


def test_markdown_table_formats_floats_and_keeps_inf_readable():
    table = markdown_table([{"a": 1.5, "b": -math.inf}, {"a": float("nan"), "b": "x"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1.5 | -inf |", "| NaN | x |"]
    assert markdown_table([{"a": 1 / 3, "b": 2}], columns=["b", "a"], fmt="{:.2f}").splitlines(
    )[2] == "| 2 | 0.33 |"


def test_matrix_table_rounds_and_labels():
    t = matrix_table(torch.tensor([[0.12345, -0.0], [1.0, 2.0]]), ["a", "b"], ["x", "y"], 2)
    lines = t.splitlines()
    assert lines[0] == "|  | x | y |" and lines[1] == "|---|---|---|"
    assert lines[2] == "| **a** | 0.12 | 0.00 |"
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        matrix_table(torch.zeros(2, 3), ["a", "b"], ["x", "y"])


def test_matrix_table_title_and_repeated_labels():
    t = matrix_table(torch.eye(2), ["the", "the"], ["the", "the"], title="Identity")
    assert t.startswith("**Identity**\n\n|  | the | the |")
    assert t.splitlines()[-1] == "| **the** | 0.000 | 1.000 |"


def test_a_pipe_inside_a_cell_is_escaped_and_stays_one_cell():
    from markdown_it import MarkdownIt

    rows = [{"variant": "causal", "max |diff|": "`a|b`", "note": "already \\| escaped"}]
    table = markdown_table(rows)
    assert table.splitlines()[0] == "| variant | max \\|diff\\| | note |"
    assert table.splitlines()[2] == "| causal | `a\\|b` | already \\| escaped |"
    html = MarkdownIt("commonmark").enable("table").render(table)
    assert html.count("<th>") == 3 and html.count("<td>") == 3      # not a run-on line of pipes
    assert "<th>max |diff|</th>" in html and "<code>a|b</code>" in html
    labelled = matrix_table(torch.eye(1), ["|x|"], ["|y|"], corner="a|b")
    assert labelled.splitlines()[0] == "| a\\|b | \\|y\\| |"

