"""Figures of the positions chapter: frequency bands, relative scores, distance profiles, ALiBi."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_lib.attention import positions
from course_lib.toolkit.plotting import heatmap


def plot_frequency_bands(fig: plt.Figure, E: int = 64, n_positions: int = 128,
                         base: float = 10000.0, train_len: int | None = None) -> None:
    """Left: ``cos(mθ_i)`` for positions ``m`` (rows) and pairs ``i`` (columns). Right: the
    wavelength ``2π/θ_i`` of every pair on a log axis, with ``train_len`` as a line."""
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    angles = positions.rope_angles(n_positions, E, base=base)
    heatmap(ax1, angles.cos(), title=f"cos(m θ_i), E = {E}, base = {base:g}", cmap="RdBu_r",
            vmin=-1, vmax=1, xlabel="pair i", ylabel="position m")
    wl = (2 * np.pi / positions.rope_frequencies(E, base)).numpy()
    ax2.semilogy(np.arange(E // 2), wl, "o-", ms=3)
    ax2.set_xlabel("pair i")
    ax2.set_ylabel("wavelength 2π/θ_i (positions)")
    ax2.set_title("one full turn takes this many positions")
    if train_len is not None:
        ax2.axhline(train_len, color="#d95f02", ls="--", label=f"training length {train_len}")
        ax2.legend(loc="upper left", fontsize=8)


def plot_relative_scores(ax: plt.Axes, grid: torch.Tensor) -> None:
    """The ``(P, P)`` grid of scores ``q_m · k_n``: constant along every diagonal."""
    heatmap(ax, grid, title="RoPE scores q_m · k_n", xlabel="key position n",
            ylabel="query position m", cmap="PuOr", vmin=-grid.abs().max().item(),
            vmax=grid.abs().max().item())


def plot_distance_profiles(ax: plt.Axes, distances: torch.Tensor,
                           profiles: dict[str, torch.Tensor], train_len: int | None = None
                           ) -> None:
    """Mean ``cos(Δθ_i)`` against the distance ``Δ``, one line per setting."""
    for label, p in profiles.items():
        ax.plot(distances.numpy(), p.numpy(), lw=1.2, label=label)
    if train_len is not None:
        ax.axvline(train_len, color="#d95f02", ls="--", lw=1, label=f"training length {train_len}")
    ax.axhline(0, color="#999999", lw=0.6)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(0, float(distances.max()))
    ax.set_xlabel("distance Δ = m − n (positions)")
    ax.set_ylabel("mean over pairs of cos(Δ θ_i)")
    ax.legend(fontsize=8)


def plot_alibi(fig: plt.Figure, bias: torch.Tensor, weights: torch.Tensor,
               heads: Sequence[int]) -> None:
    """Top: the causal ALiBi bias of some heads (``bias (H, L, S)``, -inf drawn blank); bottom:
    the attention weights of the last query over the keys for every head (``weights (H, S)``)."""
    gs = fig.add_gridspec(2, len(heads), height_ratios=[1.2, 1], hspace=0.55)
    slopes = positions.alibi_slopes(bias.shape[0])
    lo = bias[torch.isfinite(bias)].min().item()
    for c, h in enumerate(heads):
        ax = fig.add_subplot(gs[0, c])
        b = bias[h].clone()
        b[~torch.isfinite(b)] = float("nan")
        heatmap(ax, b, title=f"head {h}: m = 1/{1 / slopes[h].item():g}", cmap="magma",
                vmin=lo, vmax=0, colorbar=c == len(heads) - 1,
                ylabel="query" if c == 0 else "")
    ax = fig.add_subplot(gs[1, :])
    S = weights.shape[-1]
    for h in range(weights.shape[0]):
        ax.plot(np.arange(S), weights[h].numpy(), "o-", ms=3, lw=1,
                label=f"head {h} (m = 1/{1 / slopes[h].item():g})")
    ax.set_xlabel("key position j (the query is the last position)")
    ax.set_ylabel("weight")
    ax.set_title("equal content scores: ALiBi alone decides where each head looks")
    ax.legend(fontsize=7, ncol=4)


def plot_scaling_methods(ax: plt.Axes, methods: dict, train_len: int, factor: float) -> None:
    """Frequency ratio θ'_i/θ_i of each RoPE scaling method against the pair's wavelength."""
    theta = methods["none"]
    wavelength = (2 * torch.pi / theta).numpy()
    for (name, scaled), style in zip(
            ((n, s) for n, s in methods.items() if n != "none"),
            ("-", "--", "-.", ":", (0, (5, 1))), strict=False):
        ax.plot(wavelength, (scaled / theta).numpy(), ls=style, marker=".", label=name)
    ax.axvline(train_len - 1, color="0.5", lw=1)
    ax.text(train_len * 1.1, 1.02, f"wavelength {train_len - 1}: the slowest pair that\n"
            "turns once in training", fontsize=8, color="0.3", va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_yticks([1 / factor, 0.5, 1.0], [f"1/s = {1 / factor:g}", "0.5", "1"])
    ax.set_xlabel("wavelength 2π/θ_i of the pair (positions)")
    ax.set_ylabel("θ'_i / θ_i (1 = kept)")
    ax.legend(fontsize=8, frameon=False, loc="lower left")
