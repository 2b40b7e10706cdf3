"""Whether a learner's function is still the untouched starter (``...``, ``pass``, ...)."""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
from collections.abc import Callable
from typing import Any


def is_untouched(fn: Callable[..., Any]) -> bool:
    """True if ``fn``'s body is only a docstring, ``...``, ``pass``, ``raise NotImplementedError``
    or ``return None`` (an untouched starter)."""
    code = getattr(fn, "__code__", None)
    if code is not None and getattr(fn, "__name__", "") == "<lambda>":
        # a lambda's source line is often not parseable on its own (it sits inside a call)
        return _trivial_bytecode(code)
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except Exception:  # no source (exec'd code): judge by the bytecode
        return code is not None and _trivial_bytecode(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            return _trivial_expr(node.body)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return untouched_def(node)
    return False


def untouched_def(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a parsed ``def`` is an untouched starter (see :func:`is_untouched`)."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return all(_trivial_stmt(s) for s in body)


def _trivial_bytecode(code) -> bool:
    """Only loads of None/Ellipsis and returns: the body is ``...``, ``pass`` or a docstring."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and ins.argval not in (None, ...):
            return False
        if ins.opname not in ("RESUME", "NOP", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"):
            return False
    return True


def _trivial_expr(e: ast.AST | None) -> bool:
    return e is None or (isinstance(e, ast.Constant) and e.value in (None, Ellipsis))


def _trivial_stmt(s: ast.stmt) -> bool:
    if isinstance(s, ast.Pass):
        return True
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
        return s.value.value is Ellipsis or isinstance(s.value.value, str)
    if isinstance(s, ast.Return):
        return _trivial_expr(s.value)
    if isinstance(s, ast.Raise):
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False
