"""Markdown tables for notebooks: one renderer, for records and for labelled matrices."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch


def _cell(v: Any, fmt: str) -> str:
    if isinstance(v, float):
        return fmt.format(v) if math.isfinite(v) else ("-inf" if v < 0 else
                                                         ("inf" if v > 0 else "NaN"))
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
                   fmt: str = "{:.4g}") -> str:
    """A GitHub/MyST markdown table, one row per record; floats formatted with ``fmt`` (``inf``
    kept readable), anything else with ``str``. Columns default to the first record's keys."""
    columns = list(rows[0]) if columns is None else list(columns)
    return _render(columns, [[_cell(r[c], fmt) for c in columns] for r in rows])


_PIPE = re.compile(r"(?<!\\)\|")


def _escape(cell: str) -> str:
    """A cell's ``|`` escaped (``\\|``), so that ``max |diff|`` stays one cell; an escaped one is
    kept. Jupyter, GitHub and the book (markdown-it) all show ``\\|`` as ``|``, in code too."""
    return _PIPE.sub(r"\\|", cell)


def _render(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(map(_escape, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(_escape, row)) + " |" for row in body]
    return "\n".join(lines)


def matrix_table(matrix: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str],
                 decimals: int = 3, corner: str = "", title: str = "") -> str:
    """A ``(rows, cols)`` tensor as a markdown table with bold row labels, numbers to
    ``decimals``, under an optional bold ``title``."""
    if matrix.ndim != 2 or matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix of shape {tuple(matrix.shape)} does not match "
                         f"{len(row_labels)} row and {len(col_labels)} column labels")
    body = [[f"**{label}**", *(f"{x + 0.0:.{decimals}f}" for x in row)]  # + 0.0: -0.0 -> 0.0
            for label, row in zip(row_labels, matrix.tolist(), strict=True)]
    table = _render([corner, *col_labels], body)
    return f"**{title}**\n\n{table}" if title else table


def show_table(matrix: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str],
               title: str = "", decimals: int = 3, corner: str = "") -> None:
    """Display :func:`matrix_table` in a notebook (a rendered table in Jupyter and the book)."""
    from IPython.display import Markdown, display

    display(Markdown(matrix_table(matrix, row_labels, col_labels, decimals, corner, title)))
