"""Deterministic, value-free descriptions of case inputs (shapes, dtypes, small ints)."""

from __future__ import annotations

from typing import Any

import torch

from ._spec import OnceIterator


def shape_str(shape: Any) -> str:
    dims = tuple(int(s) for s in shape)
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def dtype_str(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def describe_value(x: Any) -> str:
    """``(2, 3) float32`` for a tensor, the repr for a number, the type name otherwise."""
    if isinstance(x, torch.Tensor):
        return f"{shape_str(x.shape)} {dtype_str(x.dtype)}"
    if isinstance(x, OnceIterator):
        inner = ", ".join(describe_value(v) for v in x.items)
        return f"an iterator over {len(x.items)} blocks [{inner}]"
    if isinstance(x, (bool, int, float, str, torch.dtype)) or x is None:
        return repr(x)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(describe_value(v) for v in x) + "]"
    return type(x).__name__


def describe_type(x: Any) -> str:
    """What the learner returned, for messages: ``numpy.ndarray``, ``NoneType``..."""
    t = type(x)
    mod = t.__module__
    return t.__name__ if mod in ("builtins", None) else f"{mod.split('.')[0]}.{t.__name__}"


def describe_case(params: tuple[str, ...], case: Any) -> str:
    """``case 'name': x (4, 7) float32, dim=0 (note)``."""
    parts = []
    for i, a in enumerate(case.args):
        name = params[i] if i < len(params) else f"arg{i + 1}"
        if isinstance(a, torch.Tensor):
            parts.append(f"{name} {describe_value(a)}")
        else:
            parts.append(f"{name}={describe_value(a)}")
    text = f"case '{case.name}': " + ", ".join(parts)
    if case.note:
        text += f" ({case.note})"
    return text
