"""Figures for the Multi-head chapter: head memory layout, per-head maps, depth profiles."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from course_lib.toolkit.plotting import OKABE_ITO, heatmap

#: one colour and one hatch per head (colour is never the only cue); text is white on the dark
#: colours, black on the light ones
HEAD_COLOURS = tuple(OKABE_ITO[c] for c in ("blue", "orange", "bluish green", "reddish purple",
                                            "sky blue", "vermillion"))
HEAD_HATCHES = ("", "///", "...", "\\\\\\", "xx", "++")
_DARK = {OKABE_ITO["blue"], OKABE_ITO["bluish green"], OKABE_ITO["vermillion"]}
#: depth-profile variants: colour, line style and marker each
DEPTH_STYLES = {"attention only": (OKABE_ITO["vermillion"], "-", "o"),
                "attention + residual": (OKABE_ITO["blue"], "--", "s"),
                "post-norm": (OKABE_ITO["bluish green"], "-.", "^"),
                "pre-norm": (OKABE_ITO["reddish purple"], ":", "D")}


def _grid(ax: plt.Axes, offsets: np.ndarray, n_feat: int, head_dim: int, title: str) -> None:
    """Draw a 2-D block of memory offsets; each cell shows token·feature, coloured and hatched
    by head."""
    rows, cols = offsets.shape
    for r in range(rows):
        for c in range(cols):
            tok, feat = divmod(int(offsets[r, c]), n_feat)
            colour, hatch = HEAD_COLOURS[feat // head_dim], HEAD_HATCHES[feat // head_dim]
            # the hatch takes the edge colour: draw it in a pale tint, then a white border
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour, hatch=hatch,
                                   edgecolor=(1, 1, 1, 0.5), lw=0))
            ax.add_patch(Rectangle((c, r), 1, 1, fill=False, edgecolor="white", lw=1.5))
            ax.text(c + 0.5, r + 0.5, f"t{tok}\nf{feat}", ha="center", va="center", fontsize=9,
                    color="white" if colour in _DARK else "black", fontweight="bold")
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_title(title, fontsize=10)


def plot_head_layout(fig: plt.Figure, tokens: int = 4, num_heads: int = 3,
                     head_dim: int = 2) -> dict[str, torch.Tensor]:
    """Top: x ``(L, H·E)`` as stored (row-major). Middle: reshape + permute gives each head all
    tokens and its own features. Bottom: reshape alone gives each head a run of memory.

    Cells are labelled t<token> f<feature>, coloured and hatched by the head the feature
    belongs to.
    Returns the offset tensors drawn: ``x (L, D)``, ``right (H, L, E)``, ``wrong (H, L, E)``.
    """
    D = num_heads * head_dim
    x = torch.arange(tokens * D).reshape(1, tokens, D)  # value = memory offset
    right = x.reshape(1, tokens, num_heads, head_dim).permute(0, 2, 1, 3)[0]
    wrong = x.reshape(1, num_heads, tokens, head_dim)[0]
    gs = fig.add_gridspec(3, num_heads, height_ratios=[1, 1, 1], hspace=0.45)
    top = fig.add_subplot(gs[0, :])
    _grid(top, x[0].numpy(), D, head_dim,
          f"x: (L={tokens}, H·E={D}) in memory, read row by row")
    for h in range(num_heads):
        _grid(fig.add_subplot(gs[1, h]), right[h].numpy(), D, head_dim,
              f"head {h}: reshape + permute ✓")
        _grid(fig.add_subplot(gs[2, h]), wrong[h].numpy(), D, head_dim,
              f"head {h}: reshape only ✗")
    return {"x": x[0], "right": right, "wrong": wrong}


def plot_head_maps(fig: plt.Figure, weights: torch.Tensor, tokens: Sequence[str],
                   names: Sequence[str]) -> None:
    """One heatmap per head from ``weights (H, L, S)``, with token labels on both axes."""
    H = weights.shape[0]
    axes = fig.subplots(1, H, sharey=True)
    for h, ax in enumerate(np.atleast_1d(axes)):
        heatmap(ax, weights[h], tokens if h == 0 else None, tokens, title=f"head {h}: {names[h]}",
                vmin=0, vmax=1, colorbar=h == H - 1, ylabel="query" if h == 0 else "")
        if h:
            ax.tick_params(labelleft=False)
    fig.tight_layout()


def plot_depth_profiles(fig: plt.Figure, profiles: dict[str, dict[str, list[float]]]) -> None:
    """Left: token spread vs depth. Right: RMS of the residual stream vs depth, per variant."""
    ax1, ax2 = fig.subplots(1, 2)
    for name, prof in profiles.items():
        colour, ls, marker = DEPTH_STYLES.get(name, (OKABE_ITO["black"], "-", "x"))
        for ax, values in ((ax1, prof["spread"]), (ax2, prof["rms"])):
            ax.plot(values, color=colour, ls=ls, marker=marker, ms=4, label=name)
    ax1.set_xlabel("depth (layers applied)")
    ax1.set_ylabel("token spread ‖X − mean‖ / ‖X‖")
    ax1.set_ylim(0, 1.05)
    ax1.set_title("do tokens stay distinct?")
    ax1.legend(frameon=False, fontsize=8)
    ax2.set_xlabel("depth (layers applied)")
    ax2.set_ylabel("RMS of the stream")
    ax2.set_yscale("log")
    ax2.set_title("size of the residual stream")
    fig.tight_layout()
