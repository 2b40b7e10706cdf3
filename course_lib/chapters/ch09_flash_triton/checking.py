"""What Triton's interpreter does not check, checked: memory bounds and the GPU compiler's rules.

:func:`install` (called when this module is imported under the interpreter) wraps three places
of ``triton.runtime.interpreter``, for every kernel launched in this process, learners' included:

- **bounds**: each launch records the byte range of every tensor argument; each ``tl.load`` /
  ``tl.store`` / atomic (``tl.atomic_add`` and the other read-modify-writes, ``tl.atomic_cas``)
  then checks that every address its mask lets through lies inside the tensor the access points
  into. The interpreter itself would read garbage (or crash) without a word; here
  the launch stops with :class:`OutOfBounds`, naming the program id and the offsets. An access
  that is not a ragged tail (all of it outside, or before the start) points at the offsets
  (a stride or the grid), not at a missing mask.
- **writes**: each store notes which program wrote each element. Two programs storing to one
  element (a race on a GPU) or a launch that leaves part of a tensor it stores to unwritten
  (the grid or the offsets do not cover it) stops with :class:`WriteConflict`. Atomics are noted
  too: many programs adding to one element atomically is what atomics are for, not a race, but
  a plain store and another program's atomic on one element are.
- **launches** (:class:`TritonLaunchCheck`, the exercises' extension): while a check calls the
  learner's function, the launches it makes and the elements their stores and atomics wrote are
  collected, so that a Triton exercise passes only if its result was written by a kernel.
- **tl.dot shapes**: the GPU's minimum K (16 for 16-bit inputs, 8 for float32), which the
  interpreter switches off.
- **TF32** (an option, :func:`emulate_tf32`): float32 ``tl.dot`` inputs cut to TF32, as an
  NVIDIA GPU does with Triton's ``input_precision="tf32"`` (the tensor core ignores the 13 low
  mantissa bits: truncation); ``rounding="nearest"`` rounds them instead.
- **speed**: a device-function call (``tl.max``, ``tl.sum`` and a kernel's own ``@triton.jit``
  helpers are all device functions) skips the interpreter's re-patching of ``triton.language``
  when the running launch has already patched the same modules (the patch is the same each
  time). Integer ``+``, ``-``, ``*`` skip the overflow check the interpreter computes (in int64)
  and then drops: its ``device_assert`` returns at once unless ``debug`` is on, as a GPU compiles
  the check only with ``debug`` (the options are left alone when it is on). Together they took a
  check of the flash forward solution from 0.36 s to 0.17 s, the backward from 0.40 s to 0.25 s.
- **the source**: :func:`gpu_source_problems` reads each kernel's code (``ast``) for what runs in
  the interpreter (plain Python) but does not compile for a GPU: ``break``/``continue``, ``try``,
  ``lambda``, calls into ``numpy``/``torch``, and the removed block pointers.
  A problem stops the launch with :class:`GpuConstraint`.

The interpreter already refuses non-power-of-two ``tl.arange`` sizes. Both exceptions derive
from ``BaseException`` so that the interpreter's ``except Exception`` (which would flatten them
into an ``InterpreterError``) and a kernel's own ``except`` let them through unchanged.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as _interp

__all__ = ["GpuConstraint", "OutOfBounds", "TritonLaunchCheck", "WriteConflict", "emulate_tf32",
           "gpu_source_problems", "install", "installed", "to_tf32"]


class OutOfBounds(BaseException):
    """A ``tl.load``/``tl.store`` touched memory outside the tensor it points into."""


class GpuConstraint(BaseException):
    """The kernel runs in the interpreter but would not compile (or would fail) on a GPU."""


class WriteConflict(BaseException):
    """Two programs wrote the same element (a race on a GPU), or a launch left part of an output
    it writes to unwritten (the grid or the offsets do not cover it)."""


#: What to check when the offsets themselves are wrong (not a ragged tail a mask would fix).
_OFFSETS_ADVICE = (
    "Check the offsets, not the mask: the stride each index is multiplied by (for a contiguous "
    "(B, H, L, E) tensor, head bh starts at bh·L·E and row i of it at i·E) and that each "
    "tl.program_id(axis) is used for the grid axis it was launched for (with grid = "
    "(cdiv(L, BLOCK_M), B·H), program_id(0) is the query block and program_id(1) the "
    "batch·head).")


@dataclass
class _Tensor:
    name: str
    lo: int        # first byte
    hi: int        # one past the last byte
    numel: int
    itemsize: int
    contiguous: bool = True
    writer: np.ndarray | None = None   # per element: the program that stored it (-1: none)
    atomic: np.ndarray | None = None   # per element: a program that updated it atomically (-1)
    #: Where the caller's tensor lies (the interpreter runs on host copies of device tensors;
    #: on a CPU the two are the same memory), and its storage, kept alive while a check looks.
    home: int = 0
    storage: Any = None


@dataclass
class _Launch:
    kernel: str
    tensors: list[_Tensor] = field(default_factory=list)


_CURRENT: list[_Launch | None] = [None]
#: ``id``s of the ``triton.language`` modules patched during the running launch: by the launch
#: itself, and by device calls (``triton.language.standard``'s functions see ``core``), whose
#: patches the interpreter never undoes. Empty outside a launch.
_PATCHED: list[frozenset[int]] = [frozenset()]


def _lang_modules(fn: Any) -> frozenset[int]:
    """The ``triton.language`` modules the interpreter patches for ``fn``: those in its globals."""
    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def _extent(name: str, t: torch.Tensor) -> _Tensor:
    """The bytes a (possibly strided) tensor view spans."""
    lo = t.data_ptr()
    if t.numel() == 0:
        return _Tensor(name, lo, lo, 0, t.element_size(), home=lo)
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True))
    return _Tensor(name, lo, lo + (last + 1) * t.element_size(), t.numel(), t.element_size(),
                   t.is_contiguous(), home=lo)


# --------------------------------------------------------------------------- bounds


def _check_access(kind: str, ptrs: Any, mask: Any) -> None:
    """Every address of ``tl.{kind}`` that ``mask`` lets through must lie in one tensor argument
    (``kind``: ``load``, ``store`` or an atomic, ``atomic_add``...); a store or atomic is noted."""
    launch = _CURRENT[0]
    if launch is None or not launch.tensors:
        return
    addrs = np.asarray(ptrs.data).astype(np.uint64)
    active = np.ones(addrs.shape, dtype=bool) if mask is None \
        else np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
    if not active.any():
        return
    size = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
    a = addrs[active].astype(np.int64)   # user-space addresses fit in int64
    inside = [((a >= t.lo) & (a + size <= t.hi)) for t in launch.tensors]
    counts = [int(x.sum()) for x in inside]
    best = int(np.argmax(counts))
    if counts[best] < a.size:
        # An access that starts in one tensor (its first lane the mask lets through) and runs
        # on past that tensor's end belongs to it, wherever the lanes past the end land: the next
        # tensor may lie right after it in memory and hold more of them (k's unmasked last
        # block landing in q was named q's "before its start" when the allocator put q there).
        holder = [i for i, x in enumerate(inside) if x[0]]
        if holder and bool((a >= launch.tensors[holder[0]].lo).all()):
            best = holder[0]
    if counts[best] == a.size:
        if kind == "store":
            _record_store(launch.tensors[best], a)
        elif kind != "load":
            _record_atomic(launch.tensors[best], a, kind)
        return
    if counts[best] == 0:   # the whole access is outside: the tensor it started from
        starts = [t for t in launch.tensors if t.lo <= int(a.min())]
        owner = max(starts, key=lambda t: t.lo) if starts else launch.tensors[0]
        ok = (a >= owner.lo) & (a + size <= owner.hi)
    else:
        owner, ok = launch.tensors[best], inside[best]
    bad = ~ok
    where = np.argwhere(active)[bad]          # block positions of the bad lanes
    first = int(a[bad][0])
    offset = (first - owner.lo) // owner.itemsize
    pos = tuple(int(i) for i in where[0])
    pid = _interp.interpreter_builder.grid_idx
    grid = tuple(int(g) for g in _interp.interpreter_builder.grid_dim)
    verb = {"load": "reads", "store": "writes"}.get(kind, "updates")
    # A ragged tail: part of the access inside, the rest just past the end (a mask fixes it).
    # Anything else (all of it outside, or before the start) means the offsets are wrong.
    span = int(a.max() - a.min()) + size
    tail = bool(ok.any()) and bool((a[bad] >= owner.hi).all()) \
        and int(a[bad].max()) < owner.hi + span
    if tail:
        advice = ("Mask the access (mask=offsets < size) so that lanes past the end touch "
                  "nothing.")
    else:
        where_ = "before its start" if first < owner.lo else (
            f"{(first - owner.hi) // owner.itemsize} elements past its end")
        advice = (f"This is not a ragged tail that a mask would fix: "
                  f"{'every address' if not ok.any() else 'addresses'} of this access lie "
                  f"outside `{owner.name}` (the first {where_}), for program id "
                  f"{tuple(int(p) for p in pid)} of the grid {grid}. " + _OFFSETS_ADVICE)
    raise OutOfBounds(
        f"tl.{kind} {verb} outside the tensor `{owner.name}` in kernel `{launch.kernel}`, "
        f"program id {tuple(int(p) for p in pid)}: {int(bad.sum())} of the {a.size} addresses "
        f"its mask lets through are out of bounds, the first at element offset {offset} (block "
        f"position {pos}); `{owner.name}` has {owner.numel} elements. The interpreter would "
        f"{'read garbage' if kind == 'load' else 'write'} there silently, a GPU may crash. "
        + advice
    )


def _program() -> int:
    """The running program's linear id."""
    x, y, z = (int(i) for i in _interp.interpreter_builder.grid_idx)
    gx, gy, _ = (int(g) for g in _interp.interpreter_builder.grid_dim)
    return x + gx * (y + gy * z)


def _per_element(t: _Tensor) -> np.ndarray:
    return np.full((t.hi - t.lo) // t.itemsize, -1, dtype=np.int64)


def _race(kind: str, t: _Tensor, idx: np.ndarray, before: np.ndarray, clash: np.ndarray,
          what: str) -> WriteConflict:
    other = int(before[clash][0])
    gx, gy, _ = (int(g) for g in _interp.interpreter_builder.grid_dim)
    other_id = (other % gx, other // gx % gy, other // (gx * gy))
    return WriteConflict(
        f"tl.{kind}: program id {tuple(int(p) for p in _interp.interpreter_builder.grid_idx)} "
        f"writes element {int(idx[clash][0])} of `{t.name}`, which program id {other_id} "
        f"already {what} ({int(clash.sum())} elements in this {kind}). On a GPU the programs "
        f"run at the same time, so which value survives is a race. Each program must own "
        f"its part of the output (or every program must add to it with tl.atomic_add). "
        + _OFFSETS_ADVICE)


def _record_store(t: _Tensor, addrs: np.ndarray) -> None:
    """Note which program wrote each element; two programs writing one element is a race, and
    so is a store to an element another program updated atomically."""
    if t.writer is None:
        t.writer = _per_element(t)
    idx = (addrs - t.lo) // t.itemsize
    me = _program()
    before = t.writer[idx]
    clash = (before >= 0) & (before != me)
    if clash.any():
        raise _race("store", t, idx, before, clash, "wrote")
    if t.atomic is not None:
        before = t.atomic[idx]
        clash = (before >= 0) & (before != me)
        if clash.any():
            raise _race("store", t, idx, before, clash, "updated with an atomic")
    t.writer[idx] = me


def _record_atomic(t: _Tensor, addrs: np.ndarray, kind: str) -> None:
    """Note an atomic update: many programs adding to one element is what atomics are for (no
    race), but an element another program stored to with a plain tl.store is raced."""
    if t.atomic is None:
        t.atomic = _per_element(t)
    idx = (addrs - t.lo) // t.itemsize
    me = _program()
    if t.writer is not None:
        before = t.writer[idx]
        clash = (before >= 0) & (before != me)
        if clash.any():
            raise _race(kind, t, idx, before, clash, "wrote with a plain tl.store")
    t.atomic[idx] = me


def _check_coverage(launch: _Launch) -> None:
    """After a launch: an output it wrote to must be written everywhere (contiguous tensors)."""
    for t in launch.tensors:
        if t.writer is None or not t.contiguous:
            continue
        missing = t.writer < 0
        if t.atomic is not None:
            missing &= t.atomic < 0
        if missing.any():
            first = int(np.argmax(missing))
            raise WriteConflict(
                f"After the launch of `{launch.kernel}`, {int(missing.sum())} of the "
                f"{t.numel} elements of `{t.name}` were never written (the first at element "
                f"offset {first}): no program stored there, so they hold whatever the memory "
                f"held. The grid and the offsets do not cover the output. " + _OFFSETS_ADVICE)


# --------------------------------------------------------------------------- GPU rules

#: Syntax the GPU compiler (triton.compiler.code_generator) has no rule for.
_UNSUPPORTED = {
    ast.Break: "`break` (loops run to their end in Triton: restructure with a mask or `while`)",
    ast.Continue: "`continue` (use a mask or tl.where instead)",
    ast.Try: "`try`/`except`",
    ast.Raise: "`raise` (use tl.device_assert)",
    ast.Lambda: "a `lambda`",
    ast.Dict: "a dict", ast.Set: "a set",
    ast.DictComp: "a dict comprehension", ast.SetComp: "a set comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Delete: "`del`",
}
#: Libraries whose functions cannot take Triton tensors (``math`` on constants does compile).
_HOST_MODULES = ("numpy", "np", "torch", "random")
_REMOVED = {"make_block_ptr": "tl.make_block_ptr (block pointers are deprecated and removed "
                              "upstream: use pointer arithmetic with masks)",
            "advance": "tl.advance (block pointers are removed upstream)"}


def gpu_source_problems(fn: Any) -> list[str]:
    """What in kernel ``fn``'s source would not compile for a GPU (empty: nothing found)."""
    fn = getattr(fn, "fn", fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    first = getattr(getattr(fn, "__code__", None), "co_firstlineno", 1)
    name = getattr(fn, "__name__", "kernel")
    found = []
    for node in ast.walk(tree):
        line = first + getattr(node, "lineno", 1) - 1
        what = _UNSUPPORTED.get(type(node))
        if what is None and isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if f.value.id in _HOST_MODULES:
                    what = (f"`{f.value.id}.{f.attr}(...)`: Python libraries do not run inside a "
                            f"GPU kernel (use tl.* functions, or compute the constant outside and "
                            f"pass it in)")
                elif f.attr in _REMOVED:
                    what = _REMOVED[f.attr]
        if what is not None:
            found.append(f"kernel `{name}`, line {line}: {what}")
    return found


_SOURCE_SEEN: dict[Any, list[str]] = {}


def _check_source(fn: Any) -> None:
    if fn not in _SOURCE_SEEN:
        _SOURCE_SEEN[fn] = gpu_source_problems(fn)
    problems = _SOURCE_SEEN[fn]
    if problems:
        raise GpuConstraint("This kernel runs in Triton's interpreter (plain Python) but would not "
                            "compile for a GPU:\n- " + "\n- ".join(problems))


# --------------------------------------------------------------------------- TF32


#: How float32 tl.dot inputs become TF32 (see :func:`emulate_tf32`): None while off.
_TF32: list[str | None] = [None]
#: The two ways a float32 becomes a TF32 (see :func:`to_tf32`).
TF32_ROUNDINGS = ("truncate", "nearest")


def to_tf32(x: np.ndarray, rounding: str = "truncate") -> np.ndarray:
    """float32 values cut to TF32: 10 explicit mantissa bits (of 23), exponent range unchanged.

    ``"truncate"`` (the default) zeroes the 13 low mantissa bits, what an NVIDIA tensor core does
    with the float32 registers Triton hands it under ``input_precision="tf32"``: unit round-off
    2^-10. ``"nearest"`` rounds to nearest with ties away from zero, what the PTX instruction
    ``cvt.rna.tf32.f32`` does (Triton emits it only for ``"tf32x3"``): unit round-off 2^-11.
    """
    if rounding not in TF32_ROUNDINGS:
        raise ValueError(f"rounding must be one of {TF32_ROUNDINGS}, got {rounding!r}")
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    carry = np.uint32(0x1000) if rounding == "nearest" else np.uint32(0)
    cut = np.where(finite, (bits + carry) & np.uint32(0xFFFFE000), bits)
    return cut.astype(np.uint32).view(np.float32)


@contextlib.contextmanager
def emulate_tf32(enabled: bool = True, rounding: str = "truncate") -> Iterator[None]:
    """Inside: every float32 ``tl.dot`` whose ``input_precision`` is not ``"ieee"`` or
    ``"tf32x3"`` cuts its inputs to TF32 first (:func:`to_tf32` with ``rounding``; the default,
    truncation, is what an NVIDIA GPU from Ampere on does with Triton's default precision); the
    products are then exact and accumulate in float32. ``exercises.check`` inside it runs the
    learner's kernel that way too (the worker is forked from this process), so the check shows
    the error the kernel will have on a GPU."""
    if rounding not in TF32_ROUNDINGS:
        raise ValueError(f"rounding must be one of {TF32_ROUNDINGS}, got {rounding!r}")
    before = _TF32[0]
    _TF32[0] = rounding if enabled else None
    try:
        yield
    finally:
        _TF32[0] = before


def _tf32_inputs(lhs: Any, rhs: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    precision = kwargs.get("input_precision", args[1] if len(args) > 1 else None)
    precision = getattr(precision, "value", precision)
    rounding = _TF32[0]
    if rounding is None or str(precision).lower() in ("ieee", "tf32x3") \
            or lhs.dtype != tl.float32 or rhs.dtype != tl.float32:
        return lhs, rhs
    return tuple(tl.core.tensor(_interp.TensorHandle(to_tf32(t.handle.data, rounding),
                                                     t.handle.dtype), t.type)
                 for t in (lhs, rhs))


def _min_dot_k(lhs: Any) -> int:
    bits = lhs.type.scalar.primitive_bitwidth
    return {8: 32, 16: 16, 32: 8, 64: 4}.get(bits, 16)


# --------------------------------------------------------------------------- launches

#: The language's name of each read-modify-write the interpreter's builder receives.
_ATOMIC_NAMES = {"ADD": "atomic_add", "FADD": "atomic_add", "MIN": "atomic_min",
                 "UMIN": "atomic_min", "MAX": "atomic_max", "UMAX": "atomic_max",
                 "AND": "atomic_and", "OR": "atomic_or", "XOR": "atomic_xor",
                 "XCHG": "atomic_xchg"}


class _Recorder:
    """The launches made while it is active, and the bytes their stores and atomics wrote (in
    the caller's memory). It keeps the written tensors' storages alive, so that no tensor made
    later can take their place in memory and pass for one a kernel wrote."""

    def __init__(self) -> None:
        self.kernels: list[str] = []
        #: ``(addresses of the written elements' first bytes, itemsize)``, one per written tensor
        self.written: list[tuple[np.ndarray, int]] = []
        #: ``(first byte, one past the last)`` of every tensor a launch received
        self.given: list[tuple[int, int]] = []
        self.storages: list[Any] = []

    def launched(self, launch: _Launch) -> None:
        self.kernels.append(launch.kernel)
        for t in launch.tensors:
            self.given.append((t.home, t.home + t.hi - t.lo))
            done = np.zeros((t.hi - t.lo) // t.itemsize, dtype=bool)
            if t.writer is not None:
                done |= t.writer >= 0
            if t.atomic is not None:
                done |= t.atomic >= 0
            if done.any():
                at = t.home + np.flatnonzero(done).astype(np.int64) * t.itemsize
                self.written.append((at, t.itemsize))
                self.storages.append(t.storage)

    def wrote(self, t: torch.Tensor) -> bool:
        """Whether a recorded store or atomic wrote into the memory ``t`` spans (a view of a
        written buffer, or the buffer itself)."""
        lo, hi = _span(t)
        return any(bool(((at + size > lo) & (at < hi)).any()) for at, size in self.written)

    def gave(self, t: torch.Tensor) -> bool:
        """Whether a launch received the memory ``t`` spans (as an argument, or part of one)."""
        lo, hi = _span(t)
        return any(a < hi and lo < b for a, b in self.given)


def _span(t: torch.Tensor) -> tuple[int, int]:
    lo = t.data_ptr()
    return lo, lo + (1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride(),
                                                                   strict=True))) * t.element_size()


#: The recorders of the checks in progress (one per call of a learner's function).
_RECORDERS: list[_Recorder] = []


def _returned_tensors(value: Any, names: tuple[str, ...]) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a learner's return value, each with the words that name it."""
    if isinstance(value, torch.Tensor):
        return [("tensor", value)]
    if isinstance(value, (tuple, list)):
        labels = names if len(names) == len(value) else tuple(
            f"element {i} of your output" for i in range(len(value)))
        return [(f"`{label}`" if label in names else label, v)
                for label, v in zip(labels, value, strict=True) if isinstance(v, torch.Tensor)]
    return []


class TritonLaunchCheck:
    """An exercise's extension (``Exercise(extension=...)``; the engine enters
    :meth:`around_call` around each call of the learner's function): a Triton exercise's
    result must be written by a ``@triton.jit`` kernel launched during the call.

    The verdict is ``("no_kernel_launch", message)`` when the call launched no kernel at all
    (plain torch), or when a returned tensor's memory was not written by a ``tl.store`` or an
    atomic of a launch during the call (a result computed by torch after, or instead of, the
    kernels; a view or reshape of a buffer a kernel wrote counts as written). One exception: a
    returned tensor that a launch received but never stored to, while another returned tensor
    was written by a kernel, is left to the comparison with the answer (a kernel that forgets
    one of its stores, lse never written, is a mistake the exercise names). Launches are seen
    by the interpreter's wrappers of :func:`install`: where kernels run on a GPU, compiled, this
    check has nothing to see and accepts every call.
    """

    mistake = "no_kernel_launch"

    def __init__(self, output_names: tuple[str, ...] = ()) -> None:
        self.output_names = tuple(output_names)

    @contextlib.contextmanager
    def around_call(self) -> Iterator[Any]:
        recorder = _Recorder()
        _RECORDERS.append(recorder)
        try:
            yield lambda value: self.judge(recorder, value)
        finally:
            _RECORDERS.remove(recorder)

    def judge(self, recorder: _Recorder, value: Any) -> tuple[str, str] | None:
        if not installed():
            return None
        returned = _returned_tensors(value, self.output_names)
        if not returned:   # None, a number...: the comparison with the answer says what is wrong
            return None
        if not recorder.kernels:
            return self.mistake, (
                "Your function launched no Triton kernel: this exercise is about writing one. "
                "Write a @triton.jit kernel, launch it as kernel[grid](...) on tensors you "
                "allocate (torch.empty), and return what the kernel stored there")
        judged = []   # (name, written by a kernel, given to a kernel)
        for name, t in returned:
            try:
                if t.layout == torch.strided and t.numel() > 0:
                    judged.append((name, recorder.wrote(t), recorder.gave(t)))
            except Exception:   # no memory to look at (a meta or exotic tensor): not judged
                continue
        some_written = any(wrote for _, wrote, _ in judged)
        kernels = ", ".join(f"`{k}`" for k in dict.fromkeys(recorder.kernels))
        for name, wrote, gave in judged:
            if wrote or (gave and some_written):   # a forgotten store: the values name it
                continue
            if gave:
                return self.mistake, (
                    f"Your function launched {kernels}, but none of its tl.store (or atomic) "
                    f"calls wrote the returned {name}, which the kernel received: a missing "
                    "tl.store, or a mask that lets no lane through? The result must be what "
                    "your kernel stores")
            return self.mistake, (
                f"Your function launched {kernels}, but the returned {name} was not written by "
                "any of its tl.store (or atomic) calls: it was computed by torch, after or "
                "instead of the kernel (a copy, .to(dtype), arithmetic on the kernel's output "
                "all make a new tensor). Do that last step inside the kernel and return the "
                "tensor the kernel stores to (a view or reshape of it is fine)")
        return None


# --------------------------------------------------------------------------- installation

_ORIGINAL: dict[str, Any] = {}


def installed() -> bool:
    return bool(_ORIGINAL)


def install() -> None:
    """Wrap the interpreter's launch, load, store and dot (idempotent)."""
    if _ORIGINAL:
        return
    GE, IB, IF = _interp.GridExecutor, _interp.InterpreterBuilder, _interp.InterpretedFunction
    sem = _interp.interpreter_semantic
    _ORIGINAL.update(init_args=GE._init_args_hst, restore=GE._restore_args_dev,
                     call=GE.__call__, load=IB.create_masked_load,
                     store=IB.create_masked_store, atomic_rmw=IB.create_atomic_rmw,
                     atomic_cas=IB.create_atomic_cas, run=IF.run, dev_call=IF.__call__,
                     dot=sem.dot)

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = _ORIGINAL["init_args"](self, args_dev, kwargs)
        launch = _Launch(getattr(self.fn, "__name__", "kernel"))
        pairs = zip(args_hst, args_dev, strict=True)
        named = list(zip(self.arg_names, pairs, strict=False)) \
            + [(k, (v, kwargs.get(k))) for k, v in kwargs_hst.items()]
        for name, (arg, dev) in named:
            t = getattr(arg, "base", arg)   # a TensorWrapper's tensor
            if isinstance(t, torch.Tensor):
                extent = _extent(name, t)
                dev = getattr(dev, "base", dev)
                if _RECORDERS and isinstance(dev, torch.Tensor):
                    extent.home, extent.storage = dev.data_ptr(), dev.untyped_storage()
                launch.tensors.append(extent)
        _CURRENT[0] = launch
        return args_hst, kwargs_hst

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        # The interpreter runs on host copies of the arguments and copies each one's storage back
        # after the launch. On a CPU the "copies" are the caller's own tensors: the copy back is
        # a storage copied onto itself (a byte tensor the size of the storage, which a check's
        # N×N watch would see), so it is skipped; anything else is copied as before.
        pairs = list(zip(args_dev, args_hst, strict=True)) \
            + [(v, kwargs_hst[k]) for k, v in kwargs.items()]
        if all(_same_memory(dev, hst) for dev, hst in pairs):
            return None
        return _ORIGINAL["restore"](self, args_dev, args_hst, kwargs, kwargs_hst)

    def __call__(self, *args, **kwargs):
        previous, patched = _CURRENT[0], _PATCHED[0]
        _PATCHED[0] = _lang_modules(self.fn)    # what the original call patches, until it ends
        try:
            result = _ORIGINAL["call"](self, *args, **kwargs)
            if _CURRENT[0] is not None and _CURRENT[0] is not previous:
                _check_coverage(_CURRENT[0])
                for recorder in _RECORDERS:
                    recorder.launched(_CURRENT[0])
            return result
        finally:
            _CURRENT[0], _PATCHED[0] = previous, patched

    def create_masked_load(self, ptrs, mask, other, *rest):
        _check_access("load", ptrs, mask)
        return _ORIGINAL["load"](self, ptrs, mask, other, *rest)

    def create_masked_store(self, ptrs, value, mask, *rest):
        _check_access("store", ptrs, mask)
        return _ORIGINAL["store"](self, ptrs, value, mask, *rest)

    def create_atomic_rmw(self, op, ptr, val, mask, *rest):
        _check_access(_ATOMIC_NAMES.get(getattr(op, "name", ""), "atomic_rmw"), ptr, mask)
        return _ORIGINAL["atomic_rmw"](self, op, ptr, val, mask, *rest)

    def create_atomic_cas(self, ptr, cmp, val, *rest):
        _check_access("atomic_cas", ptr, None)
        return _ORIGINAL["atomic_cas"](self, ptr, cmp, val, *rest)

    def run(self, *args, **kwargs):
        _check_source(self.fn)
        return _ORIGINAL["run"](self, *args, **kwargs)

    def dev_call(self, *args, **kwargs):
        # The interpreter's own device call, whose first step, _patch_lang, is skipped when this
        # launch has already patched the modules it would patch (a device call's patch is never
        # undone, so it stays in place for the rest of the launch).
        _check_source(self.fn)
        langs = _lang_modules(self.fn)
        if not langs or not langs <= _PATCHED[0]:
            _interp._patch_lang(self.fn)
            if _CURRENT[0] is not None:
                _PATCHED[0] |= langs
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise _interp.InterpreterError(repr(e)) from e

    def dot(lhs, rhs, *args, **kwargs):
        k = lhs.shape[-1]
        k = getattr(k, "value", k)
        need = _min_dot_k(lhs)
        if int(k) < need:
            raise GpuConstraint(
                f"tl.dot with {lhs.type.scalar} inputs needs K ≥ {need} on a GPU, and this one has "
                f"K = {int(k)} (the shared dimension: a's columns, b's rows). The interpreter "
                f"would accept it, a GPU compiler would not: use a block of at least {need}.")
        lhs, rhs = _tf32_inputs(lhs, rhs, args, kwargs)
        return _ORIGINAL["dot"](lhs, rhs, *args, **kwargs)

    # The learner's traceback (toolkit.checking) leaves out library frames by file name: file
    # these wrappers under the interpreter's name, so that it shows the learner's kernel line
    # and the message, not this module's plumbing.
    for f in (_init_args_hst, _restore_args_dev, __call__, create_masked_load, create_masked_store,
              create_atomic_rmw, create_atomic_cas, run, dev_call, dot, _check_access,
              _check_source, _record_store, _record_atomic, _race, _check_coverage, _program,
              _tf32_inputs):
        f.__code__ = f.__code__.replace(co_filename=_interp.__file__)
    builder = _interp.interpreter_builder
    if not builder.options.debug:      # the overflow checks would be computed, then dropped
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    GE._init_args_hst = _init_args_hst
    GE._restore_args_dev = _restore_args_dev
    GE.__call__ = __call__
    IB.create_masked_load = create_masked_load
    IB.create_masked_store = create_masked_store
    IB.create_atomic_rmw = create_atomic_rmw
    IB.create_atomic_cas = create_atomic_cas
    IF.run = run
    IF.__call__ = dev_call
    sem.dot = dot


def _same_memory(dev: Any, hst: Any) -> bool:
    """Whether a launch argument and its host copy are one tensor's memory (or not tensors)."""
    dev, hst = getattr(dev, "base", dev), getattr(hst, "base", hst)
    if not isinstance(dev, torch.Tensor) and not hasattr(dev, "data_ptr"):
        return not isinstance(dev, tuple) and type(dev).__name__ != "TensorDescriptor"
    try:
        return (isinstance(dev, torch.Tensor) and isinstance(hst, torch.Tensor)
                and dev.untyped_storage().data_ptr() == hst.untyped_storage().data_ptr())
    except Exception:
        return False


def _is_interpreted() -> bool:
    return type(tl.max).__name__ == "InterpretedFunction"


if _is_interpreted():
    install()
