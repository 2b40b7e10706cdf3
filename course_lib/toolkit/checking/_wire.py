"""What crosses from a check's worker to the parent: plain data only.

:func:`encode` turns the learner's return value (in the worker) into tensors, numbers, strings,
tuples, lists and tagged dicts, which ``torch.save`` writes and the parent reads back with
``torch.load(..., weights_only=True)``; :func:`decode` builds the parent's stand-in. No code of
the learner's runs in the parent: a value the worker could only describe arrives as an
:class:`Opaque` carrying its type's name.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch


class Opaque:
    """Stands in (in the parent) for a value the worker could only describe.

    Its class carries the original type's module and name, so messages describe it as before.
    """

    tensor_subclass = False
    layout = ""


_NAME = re.compile(r"[^A-Za-z0-9_.<>]")


def _opaque_class(module: Any, name: Any, **flags: Any) -> type:
    module = _NAME.sub("_", str(module))[:100] or "builtins"
    name = _NAME.sub("_", str(name))[:100] or "object"
    return type(name, (Opaque,), {"__module__": module, **flags})


def _describe_type(v: Any) -> dict[str, Any]:
    t = type(v)
    return {"__kind": "foreign", "module": str(getattr(t, "__module__", "builtins")),
            "name": str(getattr(t, "__qualname__", "object"))}


def _plain_tensor(v: torch.Tensor) -> Any:
    with torch._C.DisableTorchFunctionSubclass():
        d = torch.Tensor.detach(v)
        if d.layout != torch.strided:
            return {"__kind": "layout", "layout": str(d.layout).replace("torch.", ""),
                    "shape": [int(s) for s in d.shape]}
        d = d.resolve_conj().resolve_neg()
        if d.device.type != "cpu":
            d = d.cpu()
        return torch.Tensor.clone(d).as_subclass(torch.Tensor)


def encode(v: Any, depth: int = 0) -> Any:
    """A structure of plain data (tensors, numbers, str, tuples, lists, tagged dicts) for ``v``."""
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if depth > 20:
        return _describe_type(v)
    try:
        if t is torch.Tensor or t is torch.nn.Parameter:
            return _plain_tensor(v)
        if isinstance(v, torch.Tensor):
            return {**_describe_type(v), "__kind": "subclass"}
        if t is tuple or t is list:
            return t(encode(x, depth + 1) for x in v)
        if isinstance(v, tuple) and (t is torch.Size or getattr(t, "_fields", None) is not None):
            return tuple(encode(x, depth + 1) for x in tuple.__iter__(v))  # Size, namedtuple
        if t is np.ndarray:
            return {"__kind": "numpy", "data": torch.from_numpy(np.array(v, copy=True))}
        if isinstance(v, np.generic):
            item = v.item()
            if type(item) in (bool, int, float):
                return {"__kind": "npscalar", "dtype": v.dtype.str, "value": item}
    except Exception:
        pass
    return _describe_type(v)


def decode(v: Any, depth: int = 0) -> Any:
    """The parent's stand-in for an :func:`encode`\\ d value (no code of the learner runs)."""
    if depth > 25:
        return None
    t = type(v)
    if v is None or t in (bool, int, float, str) or t is torch.Tensor:
        return v
    if t is tuple or t is list:
        return t(decode(x, depth + 1) for x in v)
    if t is dict:
        kind = v.get("__kind")
        if kind == "numpy" and type(v.get("data")) is torch.Tensor:
            return v["data"].numpy()
        if kind == "npscalar":
            try:
                dtype = np.dtype(str(v.get("dtype"))[:8])
                if dtype.kind in "biuf":
                    return dtype.type(v.get("value"))
            except Exception:
                pass
        if kind == "layout":
            cls = _opaque_class("torch", "Tensor", layout=str(v.get("layout"))[:40])
            return cls()
        cls = _opaque_class(v.get("module"), v.get("name"), tensor_subclass=kind == "subclass")
        return cls()
    return _opaque_class(t.__module__, t.__name__)()
