r"""Images as tokens: ViT's patches and Swin's (shifted) windows, counted.

A ViT cuts an image ``(B, C, H, W)`` into ``p × p`` patches and flattens each into one token of
``C·p·p`` numbers, ``N = (H/p)(W/p)`` tokens; a linear map then gives each width ``D``.
Swin attends only inside ``M × M`` windows of an ``h × w`` grid of tokens of width ``C``;
its paper counts multiply-adds, which the course doubles into FLOPs:

.. math:: \Omega(\text{MSA}) = 4hwC^2 + 2(hw)^2C, \qquad \Omega(\text{W-MSA}) = 4hwC^2 + 2M^2hwC
"""

from __future__ import annotations

import torch


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W)`` → ``(B, N, C·p·p)``, ``N = (H/p)·(W/p)`` patches in row-major order.

    Each token lists its patch's numbers channel by channel, the order of ``Conv2d``'s weight
    ``(D, C, p, p)``, so ``patchify(x, p) @ w.reshape(D, -1).T`` is ``Conv2d(C, D, p, stride=p)``.
    """
    if images.dim() != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
    B, C, H, W = images.shape
    if H % patch or W % patch:
        raise ValueError(f"patch={patch} must divide H={H} and W={W}")
    x = images.reshape(B, C, H // patch, patch, W // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, (H // patch) * (W // patch), C * patch * patch)


def window_ids(h: int, w: int, window: int, shift: int = 0) -> torch.Tensor:
    """``(h·w,)`` the window of each grid token (row-major), windows ``window × window``.

    With ``shift = s`` the window borders move by ``s`` rows and columns: the partition Swin's
    shifted layers use (its cyclic shift plus mask computes exactly these windows).
    """
    r = torch.arange(h).repeat_interleave(w)
    c = torch.arange(w).repeat(h)
    wr = torch.div(r - shift, window, rounding_mode="floor") + 1  # shift > 0: a partial first row
    wc = torch.div(c - shift, window, rounding_mode="floor") + 1
    return wr * (w // window + 2) + wc


def window_mask_2d(h: int, w: int, window: int, shift: int = 0) -> torch.Tensor:
    """``(h·w, h·w)`` bool, True where two tokens of the grid share a (shifted) window."""
    ids = window_ids(h, w, window, shift)
    return ids[:, None] == ids[None, :]


def swin_flops(h: int, w: int, channels: int, window: int) -> dict[str, int]:
    """FLOPs of one attention layer on an ``h × w`` grid of width ``C``, projections included:
    twice Liu et al.'s multiply-add counts, global ``2(4hwC² + 2(hw)²C)`` and windowed
    ``2(4hwC² + 2M²hwC)``."""
    n, C = h * w, channels
    return {"global": 2 * (4 * n * C * C + 2 * n * n * C),
            "windowed": 2 * (4 * n * C * C + 2 * window * window * n * C)}


def windowed_scores_and_mix(x: torch.Tensor, h: int, w: int, window: int) -> torch.Tensor:
    """The core of windowed attention on tokens ``x (h·w, C)`` (no projections): per window,
    ``softmax(X Xᵀ/√C) X``; returns ``(h·w, C)`` in window order. Its two matmuls cost
    ``2M²hwC`` multiply-adds, ``4M²hwC`` FLOPs."""
    C = x.shape[-1]
    g = x.reshape(h // window, window, w // window, window, C).permute(0, 2, 1, 3, 4)
    g = g.reshape(-1, window * window, C)                         # (windows, M², C)
    p = torch.softmax(g @ g.transpose(-2, -1) / C**0.5, dim=-1)
    return (p @ g).reshape(-1, C)
