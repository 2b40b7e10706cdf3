"""Routes to the course's own answers from inside the check's worker: each is refused.

The guard recognises course code by content (``_course_code``), so a course function reached
through any of these routes is refused like a direct call, with its real name.
"""

from __future__ import annotations

import pytest

from course_lib import exercises
from course_lib.toolkit.checking import _isolation

pytestmark = pytest.mark.skipif(not _isolation.fork_available(), reason="needs os.fork (Linux)")

SPLIT = "course_lib.chapters.ch04_multi_head.exercises.split_heads"


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))


def _solution():
    """The solution reached by attribute access only (calling get_exercise would be refused)."""
    import sys

    return sys.modules["course_lib.chapters.ch04_multi_head.exercises"].split_heads


def relabelled(x, num_heads):
    import types

    sol = _solution()
    f = types.FunctionType(sol.__code__.replace(co_filename="<x>", co_name="mine",
                                                co_qualname="mine"), sol.__globals__)
    return f(x, num_heads)


def copied(x, num_heads):
    import types

    import torch

    return types.FunctionType(_solution().__code__, {"torch": torch})(x, num_heads)


def recompiled(x, num_heads):
    import inspect
    import textwrap

    import torch

    ns = {"torch": torch}
    exec(compile(textwrap.dedent(inspect.getsource(_solution())), "<cell>", "exec"), ns)
    return ns["split_heads"](x, num_heads)


def marshalled(x, num_heads):
    import marshal
    import types

    import torch

    code = marshal.loads(marshal.dumps(_solution().__code__))
    return types.FunctionType(code, {"torch": torch})(x, num_heads)


def found_by_gc(x, num_heads):
    import gc
    import types

    gc.unfreeze()         # the worker froze what it inherited from the session
    for o in gc.get_objects():
        if isinstance(o, types.FunctionType) and o.__name__ == "split_heads" \
                and (o.__module__ or "").startswith("course_lib."):
            return o(x, num_heads)
    raise LookupError("not found")


def from_sys_modules(x, num_heads):
    import sys

    return sys.modules["course_lib.chapters.ch04_multi_head.exercises"].split_heads(x, num_heads)


def reloaded(x, num_heads):
    import importlib
    import sys

    module = importlib.reload(sys.modules["course_lib.chapters.ch04_multi_head.exercises"])
    return module.split_heads(x, num_heads)


def source_file_execd(x, num_heads):
    import sys

    path = sys.modules["course_lib.chapters.ch04_multi_head.exercises"].__file__
    ns = {"__name__": "mine"}
    exec(compile(open(path).read(), "<cell>", "exec"), ns)
    return ns["split_heads"](x, num_heads)


def source_file_execd_under_its_own_name(x, num_heads):
    import sys

    module = sys.modules["course_lib.chapters.ch04_multi_head.exercises"]
    ns = {"__name__": "mine"}
    exec(compile(open(module.__file__).read(), module.__file__, "exec"), ns)
    return ns["split_heads"](x, num_heads)


def through_a_frame(x, num_heads):
    import sys

    frame = sys._getframe()
    while frame is not None:          # the checker's frames: any course function in reach
        for v in list(frame.f_locals.values()):
            sol = getattr(v, "solution", None) if type(v).__name__ == "Exercise" else None
            if callable(sol):
                return sol(x, num_heads)
        frame = frame.f_back
    return _solution()(x, num_heads)


ROUTES = [relabelled, copied, recompiled, marshalled,
          found_by_gc, from_sys_modules, reloaded, source_file_execd,
          source_file_execd_under_its_own_name, through_a_frame]


#: Routes the worker's policy stops before the guard sees a call (issue 52: no frames, no gc
#: walk, no code loaded from bytes or made to claim a course file) -> what the refusal names.
TAMPERING = {"marshalled": "marshal", "found_by_gc": "gc.get_",
             "source_file_execd_under_its_own_name": "code made to claim",
             "through_a_frame": "sys._getframe"}


@pytest.mark.parametrize("route", ROUTES, ids=[r.__name__ for r in ROUTES])
def test_every_route_to_the_course_solution_is_refused(route):
    result = exercises.check("split_heads", route)
    if route.__name__ in TAMPERING:
        assert not result.passed and result.mistake == "tampering", result.message
        assert TAMPERING[route.__name__] in result.message, result.message
        return
    assert not result.passed and result.mistake == "course_call", result.message
    # named by what was reached first: the function, its twin in course_lib.attention, or the
    # module body that defines it
    assert result.message.startswith("`course_lib."), result.message


def test_a_copy_is_named_by_its_original_not_by_the_name_it_claims():
    result = exercises.check("split_heads", relabelled)
    assert result.message.startswith(f"`{SPLIT}` is the course's own answer"), result.message


def test_own_code_relabelled_as_a_course_module_body_is_not_trusted_as_a_caller():
    """A learner's function dressed up as a course module body (which the guard lets run, as
    an import) would make its calls into course code look like the course calling itself."""
    def sneaky(x, num_heads):
        import sys
        import types

        module = sys.modules["course_lib.chapters.ch04_multi_head.exercises"]

        def body(x, num_heads):
            return module.split_heads(x, num_heads)

        code = body.__code__.replace(co_filename=module.__file__, co_name="<module>")
        return types.FunctionType(code, {"module": module}, "x", None, body.__closure__)(
            x, num_heads)

    result = exercises.check("split_heads", sneaky)
    # the relabelled code is refused where it is made (issue 52), before it could call
    assert not result.passed and result.mistake == "tampering", result.message
    assert "code made to claim" in result.message, result.message


def test_a_copy_cannot_claim_an_allowed_name(monkeypatch):
    ex = exercises.get_exercise("split_heads")
    monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib.attention.masks",))

    def sneaky(x, num_heads):
        import types

        sol = _solution()
        code = sol.__code__.replace(co_filename="<x>", co_qualname="causal_mask")
        globs = dict(sol.__globals__, __name__="course_lib.attention.masks")
        return types.FunctionType(code, globs)(x, num_heads)

    result = exercises.check("split_heads", sneaky)
    assert not result.passed and result.mistake == "course_call", result.message


def test_a_learner_writing_a_small_course_body_by_hand_is_not_refused():
    """The causal_mask oracle is one line without a docstring; typed by a learner it is theirs."""
    def causal_mask(n):
        import torch

        return torch.ones(n, n, dtype=torch.bool).tril()

    result = exercises.check("causal_mask", causal_mask)
    assert result.passed, result.message


def test_importing_course_modules_inside_the_worker_stays_allowed():
    def split_heads(x, num_heads):
        import importlib

        importlib.import_module("course_lib.chapters.ch04_multi_head.helpers")
        B, L, D = x.shape
        return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)

    result = exercises.check("split_heads", split_heads)
    assert result.passed, result.message


def test_a_large_function_recompiled_without_its_docstrings_is_refused():
    def sneaky(x, w_qkv, w_o, num_heads):
        import inspect
        import math
        import sys
        import textwrap

        import torch

        sol = sys.modules["course_lib.chapters.ch04_multi_head.exercises"].multi_head_attention
        ns = {"torch": torch, "math": math}
        exec(compile(textwrap.dedent(inspect.getsource(sol)), "<cell>", "exec", optimize=2), ns)
        return ns["multi_head_attention"](x, w_qkv, w_o, num_heads)

    result = exercises.check("multi_head_attention", sneaky)
    assert not result.passed and result.mistake == "course_call", result.message


def test_a_short_solution_retyped_without_its_docstring_is_the_learners_own():
    """Below MIN_INSTRUCTIONS a docstring-free body is not recognised by content: a learner may
    well write the same three lines (so may ``compile(..., optimize=2)``, knowingly)."""
    def split_heads(x, num_heads):
        B, L, D = x.shape
        x = x.reshape(B, L, num_heads, D // num_heads)
        return x.permute(0, 2, 1, 3)

    result = exercises.check("split_heads", split_heads)
    assert result.passed, result.message


def test_patching_the_guard_class_inside_the_worker_changes_nothing():
    def sneaky(x, num_heads):
        from course_lib.toolkit.checking import _isolation as iso

        iso.CourseGuard.refused = lambda self, frame: None
        return _solution()(x, num_heads)

    result = exercises.check("split_heads", sneaky)
    assert not result.passed and result.mistake == "course_call", result.message


def test_a_course_helper_allowed_from_course_code_is_refused_when_called_directly(monkeypatch):
    """The watch settles a code object's verdict once only for code that is not the course's:
    ``causal_mask`` runs (allowed) inside the allowed ``sliding_window_mask``, and the same code
    object called by the learner next is still refused."""
    ex = exercises.get_exercise("split_heads")
    monkeypatch.setattr(ex, "allowed_course_calls",
                        ("course_lib.attention.masks.sliding_window_mask",))

    def allowed_only(x, num_heads):
        import sys

        masks = sys.modules["course_lib.attention.masks"]
        for _ in range(3):
            masks.sliding_window_mask(4, window=2)       # calls causal_mask itself
        B, L, D = x.shape
        return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)

    def then_directly(x, num_heads):
        import sys

        allowed_only(x, num_heads)
        return sys.modules["course_lib.attention.masks"].causal_mask(4) and None

    result = exercises.check("split_heads", allowed_only)
    assert result.passed, result.message
    result = exercises.check("split_heads", then_directly)
    assert not result.passed and result.mistake == "course_call", result.message
    assert "causal_mask" in result.message.split("`")[1], result.message
