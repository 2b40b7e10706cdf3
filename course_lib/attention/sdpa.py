"""torch's fused attention kernel behind the course's signature, plus "which kernel ran?".

``scaled_dot_product_attention`` is a thin wrapper over
:func:`torch.nn.functional.scaled_dot_product_attention` (same math, softmax(QKᵀ·s + M) V, same
shapes ``(..., L, E), (..., S, E), (..., S, Ev) → (..., L, Ev)``) that can pin one backend:
``"math"`` (the reference C++ path), ``"flash"`` (FlashAttention; also a CPU kernel),
``"efficient"`` (memory-efficient attention, CUDA) or ``"cudnn"`` (cuDNN, CUDA).
:func:`backend_report` tells which of them torch picks for given inputs, and why the others
are not eligible.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ._validate import causal_alignment, check_sdpa_args
from .masks import causal_mask

#: course name -> torch backend enum
BACKENDS: dict[str, SDPBackend] = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
_NAMES = {int(b): name for name, b in BACKENDS.items()}


class BackendUnavailableError(RuntimeError):
    """The requested SDPA backend cannot run these inputs on this device."""


def _describe(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> str:
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in (("query", query), ("key", key),
                                                            ("value", value)))
    return f"{shapes}, {query.dtype} on {query.device}"


def _run_pinned(backend: str, query, key, value, **kw) -> torch.Tensor:
    """Run torch's SDPA with only ``backend`` enabled; turn torch's refusal into a clear error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(BACKENDS[backend]):
                return F.scaled_dot_product_attention(query, key, value, **kw)
        except RuntimeError as err:
            if "No available kernel" not in str(err) and "No viable backend" not in str(err):
                raise                                      # a real failure, not a refusal
            reasons = " ".join(str(w.message).split(" (Triggered internally")[0] for w in caught)
            if not reasons and query.device.type == "cpu" and backend in ("efficient", "cudnn"):
                reasons = "torch has no CPU kernel for this backend (CUDA only)"
            raise BackendUnavailableError(
                f"SDPA backend {backend!r} cannot run {_describe(query, key, value)}: "
                f"{reasons or err}"
            ) from err


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    backend: str | None = None,
) -> torch.Tensor:
    """torch's softmax(QKᵀ·s + M) V kernel; returns ``(..., L, Ev)``.

    ``backend``: ``None`` lets torch choose; ``"math" | "flash" | "efficient" | "cudnn"`` pins
    that kernel and raises :class:`BackendUnavailableError` (a ``RuntimeError``) with torch's
    reasons if it cannot run these inputs.

    ``attn_mask`` may be a ``torch.nn.attention.bias`` causal bias: it is handed to torch as is,
    so torch picks its kernel for the variant. One deliberate difference from torch 2.13:
    ``attn_mask`` with ``is_causal=True`` is refused here (a ``RuntimeError`` and a
    ``ValueError``), as torch's math kernel and documentation say, whereas torch's default
    CPU kernel silently applies both.
    """
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
              enable_gqa=enable_gqa)
    if backend is None:
        return F.scaled_dot_product_attention(query, key, value, **kw)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be None or one of {list(BACKENDS)}, got {backend!r}")
    return _run_pinned(backend, query, key, value, **kw)


@dataclass
class BackendReport:
    """Which SDPA kernel torch runs for some inputs, and which ones could run them."""

    chosen: str                      #: the backend torch picks with every backend enabled
    device: str                      #: e.g. ``"cpu"`` or ``"cuda:0"``
    eligible: dict[str, bool] = field(default_factory=dict)  #: backend -> can it run these?
    reasons: dict[str, str] = field(default_factory=dict)    #: backend -> why not (torch's words)

    def __str__(self) -> str:
        lines = [f"torch runs the {self.chosen!r} SDPA backend on {self.device}"]
        for name, ok in self.eligible.items():
            why = "eligible" if ok else "not eligible: " + self.reasons[name]
            lines.append(f"  {name:9s} {why}")
        return "\n".join(lines)


def backend_report(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> BackendReport:
    """Report the backend torch's SDPA dispatches to for these inputs on their device.

    Each backend is tried pinned (the inputs are run once per backend), which gives eligibility
    and torch's reasons; the choice is torch's own selector (``torch._fused_sdp_choice``), or,
    if that private function is missing, the first eligible backend in torch's priority order.
    """
    check_sdpa_args(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
              enable_gqa=enable_gqa)
    report = BackendReport(chosen="math", device=str(query.device))
    for name in BACKENDS:
        try:
            _run_pinned(name, query, key, value, **kw)  # grad mode as the caller's
            report.eligible[name] = True
        except BackendUnavailableError as err:
            report.eligible[name] = False
            report.reasons[name] = str(err).split(": ", 1)[-1]
    attn_mask, align = causal_alignment(query, key, attn_mask, is_causal)  # CausalBias: as torch
    if align is not None:                                                  # dispatches it
        is_causal = align == "top_left"
        if not is_causal:
            attn_mask = causal_mask(query.shape[-2], key.shape[-2], device=query.device,
                                    align=align)
    kw.update(attn_mask=attn_mask, is_causal=is_causal)
    try:
        report.chosen = _NAMES.get(torch._fused_sdp_choice(query, key, value, **kw), "math")
    except (AttributeError, RuntimeError, TypeError):
        order = torch._C._get_sdp_priority_order()
        eligible = [_NAMES[i] for i in order if i in _NAMES and report.eligible[_NAMES[i]]]
        report.chosen = eligible[0] if eligible else "math"
    return report
