"""One explorer abstraction that renders live in Jupyter and as a JS player in the HTML book.

An explorer is a pure drawing function ``draw(fig, **params)`` plus its controls. In Jupyter,
:meth:`Explorer.show` returns live ipywidgets; when the book is built (``make book`` exports
``COURSE_LIB_BOOK=1``) it returns a matplotlib *jshtml* player over precomputed frames, so every
slider in the HTML actually changes what is shown. ``draw`` is what the tests call headlessly.
"""

from __future__ import annotations

import functools
import html as html_lib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.animation import FuncAnimation

from .book import book_mode

# What a notebook shows for an explorer whose kernel is gone (a reload, a reopened notebook, a
# fresh workbook): the text/plain of its output, instead of the widget's repr "VBox(children=...".
LIVE_FALLBACK = "Run this cell to show the live explorer."
# The book's players are drawn so that their smallest text is at least this many pixels high at the
# image's own size; on a phone the frame keeps that size and scrolls sideways (course.css).
PLAYER_MIN_TEXT_PX = 10.5
# An explorer's figure titles are at least this many pixels high at the image's own size, in Lab as
# in the book's player: a title drawn smaller (``set_title(..., fontsize=9)`` at 72 dpi) is raised
# after drawing (:func:`legible_titles`).
TITLE_MIN_PX = 11.0
# The live controls (Lab): each control this wide, its name in a column as wide as the longest
# name, so that they wrap row by row in a tidy grid (:meth:`Explorer.live`). Em of the widgets'
# font (13 px in JupyterLab).
CONTROL_MIN_WIDTH_EM = 20.0
_EM_PER_CHAR = 0.62     # the widgets' font: a character is at most about 0.6 em wide

# What the player adds to matplotlib's jshtml (no autoplay: it starts on its first frame, paused):
# the frame image's text alternative follows the frame shown (the slider's aria-valuetext too),
# and under prefers-reduced-motion the buttons that animate (play, play backwards, speed, loop
# mode) are hidden, leaving the slider and the step buttons.
_PLAYER_STYLE = """<style>
.course-player button:focus-visible, .course-player input:focus-visible {
  outline: 3px solid #0072B2; outline-offset: 2px; }
@media (prefers-reduced-motion: reduce) {
  .course-player button[aria-label="Play"], .course-player button[aria-label="Play backwards"],
  .course-player button[aria-label="Pause"], .course-player button[aria-label="Decrease speed"],
  .course-player button[aria-label="Increase speed"], .course-player .anim-state {
    display: none; }
}
</style>"""
_PLAYER_SCRIPT = """<script>
(function () {
  var alts = %(alts)s, values = %(values)s;
  var img = document.getElementById("_anim_img%(id)s");
  var slider = document.getElementById("_anim_slider%(id)s");
  function describe() {
    var i = Math.max(0, Math.min(alts.length - 1, parseInt(slider.value, 10) || 0));
    img.setAttribute("alt", alts[i]);
    slider.setAttribute("aria-valuetext", values[i]);
  }
  new MutationObserver(describe).observe(img, {attributes: true, attributeFilter: ["src"]});
  slider.addEventListener("input", describe);
  describe();
})();
</script>"""


def _plain(text: str) -> str:
    """Figure text as words: mathtext's ``$`` and backslashes out, lines joined."""
    text = re.sub(r"\\(mathrm|mathbf|mathit|text)\{([^}]*)\}", r"\2", text)
    text = text.replace("$", "").replace("\\", "")
    return re.sub(r"\s+", " ", text).strip()


def _tallest_bar(ax: plt.Axes) -> str:
    """", tallest bar cat (0.97)" for a bar chart whose bars carry the x tick labels, else ""."""
    from matplotlib.container import BarContainer

    ticks = [_plain(t.get_text()) for t in ax.get_xticklabels()]
    for c in ax.containers:
        if isinstance(c, BarContainer) and len(c.patches) == len(ticks) and any(ticks):
            heights = [p.get_height() for p in c.patches]
            k = max(range(len(heights)), key=lambda i: heights[i])
            return f", tallest bar {ticks[k]} ({heights[k]:.2g})"
    return ""


def figure_summary(fig: plt.Figure) -> str:
    """What a drawn figure's own text says: its title, then per panel the title, the axes'
    labels and the legend's entries ("softmax(x / T), entropy 1.23 nats: x token, y
    probability"). The fallback text alternative of a player's frame (:attr:`Explorer.describe`
    gives a better one)."""
    parts = []
    if getattr(fig, "_suptitle", None) is not None and fig._suptitle.get_text().strip():
        parts.append(_plain(fig._suptitle.get_text()))
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        title = _plain(" ".join(t.get_text() for t in (ax.title, ax._left_title, ax._right_title)
                                if t.get_text().strip()))
        axes = ", ".join(f"{name} {_plain(lab)}" for name, lab in
                         (("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if lab.strip())
        legend = ax.get_legend()
        entries = ", ".join(_plain(t.get_text()) for t in legend.get_texts()) if legend else ""
        panel = ": ".join(p for p in (title or "panel", axes) if p)
        if entries:
            panel += f" (legend: {entries})"
        panel += _tallest_bar(ax)
        parts.append(panel)
    return "; ".join(parts)


def _titles(fig: plt.Figure) -> list[Any]:
    """The figure's visible, non-empty titles: its suptitle and every panel's titles."""
    texts = [getattr(fig, "_suptitle", None)]
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title]
    return [t for t in texts if t is not None and t.get_visible() and t.get_text().strip()]


def legible_titles(fig: plt.Figure, min_px: float = TITLE_MIN_PX) -> bool:
    """Raise every title of ``fig`` drawn below ``min_px`` pixels (at the figure's dpi, 1 pt =
    dpi/72 px) to ``min_px``; True if one was raised."""
    min_pt = min_px * 72 / fig.dpi
    raised = False
    for t in _titles(fig):
        if t.get_fontsize() < min_pt - 1e-9:
            t.set_fontsize(min_pt)
            raised = True
    return raised


@functools.cache
def _live_box() -> type:
    """A ``VBox`` whose text/plain is :data:`LIVE_FALLBACK` (ipywidgets imported on first use)."""
    import ipywidgets as w

    class LiveExplorer(w.VBox):
        """The explorer's widgets; without a live kernel, Jupyter shows the text/plain."""

        def _repr_mimebundle_(self, **kwargs: Any):
            bundle = super()._repr_mimebundle_(**kwargs)
            if isinstance(bundle, dict):
                bundle["text/plain"] = LIVE_FALLBACK
            return bundle

    return LiveExplorer


def _no_redraw(*args: Any, **kwargs: Any) -> None:
    """A canvas's ``draw_idle`` while a player saves its frames (:meth:`Explorer.player_html`)."""


@dataclass(frozen=True)
class Control:
    """One control: a label and the discrete options it can take (a slider, or a toggle)."""

    label: str
    options: Sequence[Any]
    default: Any = None
    kind: str = "slider"  # "slider" | "dropdown" | "toggle"

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"control {self.label!r} needs at least one option")
        if self.default is None:
            object.__setattr__(self, "default", self.options[0])
        if self.default not in list(self.options):
            raise ValueError(f"default {self.default!r} of control {self.label!r} is not one of "
                             f"its options {list(self.options)!r}")


@dataclass
class Explorer:
    """Controls + a ``draw(fig, **params)`` function.

    ``animate`` names the control the book's player sweeps (the others stay at their defaults);
    ``frames`` may instead list the exact parameter dicts the player shows. ``describe``: the
    text alternative of one frame, from its parameters (what the frame shows, for a reader who
    cannot see it); without it, the frame's parameters and its figure's own text
    (:func:`figure_summary`).
    """

    draw: Callable[..., None]
    controls: dict[str, Control]
    animate: str | None = None
    frames: list[dict[str, Any]] | None = None
    figsize: tuple[float, float] = (8.0, 3.5)
    interval_ms: int = 600
    dpi: int = 72
    describe: Callable[[dict[str, Any]], str] | None = None

    def defaults(self) -> dict[str, Any]:
        return {name: c.default for name, c in self.controls.items()}

    def render(self, **params: Any) -> plt.Figure:
        """Draw one frame into a new figure (used by tests, static output and the live
        explorer)."""
        full = {**self.defaults(), **params}
        fig = plt.figure(figsize=self.figsize, dpi=self.dpi)
        self._draw(fig, full)
        return fig

    def _draw(self, fig: plt.Figure, params: dict[str, Any]) -> None:
        """``draw(fig, **params)``, then its titles raised to :data:`TITLE_MIN_PX`
        (:func:`legible_titles`); a figure that ``draw`` laid out with ``fig.tight_layout()`` is
        laid out again around the larger titles."""
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        tight_layout = fig.tight_layout

        def recorded(*args: Any, **kwargs: Any) -> None:
            calls.append((args, kwargs))
            tight_layout(*args, **kwargs)

        fig.tight_layout = recorded          # type: ignore[method-assign]
        try:
            self.draw(fig, **params)
        finally:
            del fig.tight_layout
        if legible_titles(fig) and calls:
            args, kwargs = calls[-1]
            fig.tight_layout(*args, **kwargs)

    def player_frames(self) -> list[dict[str, Any]]:
        if self.frames is not None:
            return [{**self.defaults(), **f} for f in self.frames]
        name = self.animate or next(iter(self.controls))
        return [{**self.defaults(), name: opt} for opt in self.controls[name].options]

    def smallest_text_pt(self) -> float:
        """The font size (pt) of the smallest visible text of the default frame."""
        from matplotlib.text import Text

        fig = self.render()
        fig.canvas.draw()
        sizes = [t.get_fontsize() for t in fig.findobj(Text)
                 if t.get_visible() and t.get_text().strip()]
        plt.close(fig)
        return min(sizes, default=10.0)

    def player_dpi(self, smallest_pt: float | None = None) -> int:
        """``dpi``, raised so the smallest text is :data:`PLAYER_MIN_TEXT_PX` high (1 pt = dpi/72
        px); ``smallest_pt``: :meth:`smallest_text_pt`, where the caller has it already."""
        pt = self.smallest_text_pt() if smallest_pt is None else smallest_pt
        return max(self.dpi, math.ceil(72 * PLAYER_MIN_TEXT_PX / pt))

    def frame_values(self) -> list[str]:
        """Per player frame, the parameters that change across the frames ("T = 0.5"): the
        slider's spoken value and the start of the frame's text alternative."""
        frames = self.player_frames()
        varying = [n for n in self.controls if len({repr(f[n]) for f in frames}) > 1]
        def text(v: Any) -> str:
            return f"{v:g}" if isinstance(v, float) else _plain(str(v))

        return [", ".join(f"{self.controls[n].label} = {text(f[n])}" for n in varying)
                or f"frame {i + 1}" for i, f in enumerate(frames)]

    def frame_alt(self, fig: plt.Figure, params: dict[str, Any], value: str) -> str:
        """The text alternative of one frame: ``describe(params)`` if given, else the frame's
        parameters and :func:`figure_summary` of its figure."""
        if self.describe is not None:
            text = self.describe(params)
        else:
            text = figure_summary(fig)
        return f"{value}. {text}" if text else value

    def player_html(self) -> str:
        """A self-contained HTML/JS player (slider + buttons) over precomputed frames, wrapped in
        ``<div class="course-player" data-min-text-px=...>`` (the smallest text at natural size).

        Accessible: it does not play by itself; the slider is named by the animated control's
        label and speaks each frame's value; the frame image's ``alt`` follows the frame
        (:meth:`frame_alt`); under ``prefers-reduced-motion`` only the slider and the step
        buttons show. matplotlib's buttons already carry names (``aria-label``)."""
        frames = self.player_frames()
        values = self.frame_values()
        smallest_pt = self.smallest_text_pt()
        dpi = self.player_dpi(smallest_pt)
        min_px = smallest_pt * dpi / 72
        fig = plt.figure(figsize=self.figsize, dpi=dpi)
        alts: dict[int, str] = {}

        def update(i: int):
            fig.clear()
            self._draw(fig, frames[i])
            alts[i] = self.frame_alt(fig, frames[i], values[i])
            return []

        # Each frame is drawn once and rendered once, by the writer's savefig: no first frame
        # drawn ahead (``init_func``), and no canvas redraw after each frame (``draw_idle``, which
        # on a canvas with no screen renders the whole figure again for nothing): a third of the
        # player's time, with the same frames.
        anim = FuncAnimation(fig, update, frames=len(frames), init_func=list,
                             interval=self.interval_ms, blit=False, repeat=False)
        fig.canvas.draw_idle = _no_redraw      # type: ignore[method-assign]
        try:
            html = anim.to_jshtml(default_mode="once")
        finally:
            del fig.canvas.draw_idle
            plt.close(fig)
        alt_list = [alts.get(i, values[i]) for i in range(len(frames))]
        m = re.search(r'<img id="_anim_img(\w+)">', html)
        if m is None:
            raise RuntimeError("matplotlib's jshtml has no frame image (<img id=\"_anim_img...\">)")
        uid = m.group(1)
        names = [self.controls[n].label for n in self.controls
                 if len({repr(f[n]) for f in frames}) > 1]
        slider_name = html_lib.escape("frame: " + ", ".join(names) if names else "frame",
                                      quote=True)
        img = (f'<div class="course-player-frame"><img id="_anim_img{uid}" '
               f'alt="{html_lib.escape(alt_list[0], quote=True)}"></div>')
        html = html.replace(m.group(0), img, 1)
        html = html.replace(f'<input id="_anim_slider{uid}" type="range"',
                            f'<input id="_anim_slider{uid}" type="range" '
                            f'aria-label="{slider_name}"', 1)
        # "</" inside the JSON cannot end the script element early
        script = _PLAYER_SCRIPT % {"alts": json.dumps(alt_list).replace("</", "<\\/"),
                                   "values": json.dumps(values).replace("</", "<\\/"),
                                   "id": uid}
        return (f'<div class="course-player" data-min-text-px="{min_px:.1f}">{_PLAYER_STYLE}'
                f'{html}{script}</div>')

    def control_widths(self) -> tuple[str, str, str]:
        """The live controls' widths, in em of the widgets' font: (every control, its name's
        column, a toggle's button). One width for all, so that they wrap in a tidy grid: at least
        :data:`CONTROL_MIN_WIDTH_EM`, wider where a name or a toggle's buttons need it."""
        def em(chars: int) -> float:
            return math.ceil(chars * _EM_PER_CHAR * 2) / 2

        label = max(3.0, em(max(len(c.label) for c in self.controls.values()) + 1))
        toggles = [c for c in self.controls.values() if c.kind == "toggle"]
        button = max((em(len(str(o)) + 2) for c in toggles for o in c.options), default=0.0)
        # a toggle's buttons and their 0.3 em gaps beside the name
        need = max((label + len(c.options) * (button + 0.3) for c in toggles), default=0.0)
        width = max(CONTROL_MIN_WIDTH_EM, label + 12.0, need)
        return f"{width:g}em", f"{label:g}em", f"{button:g}em"

    def live(self):
        """Live ipywidgets: one widget per control, the figure redrawn on every change.

        The controls wrap row by row in a flex box (``flex_flow="row wrap"``), each as wide as
        the others with its name in a column of one width (:meth:`control_widths`), so that
        they line up at any width of the notebook. Each is named by its control's label
        (``description``: the widget's label, which screen readers announce) and works from the
        keyboard as ipywidgets' sliders, drop-downs and toggle buttons do (Tab, the arrow
        keys)."""
        import ipywidgets as w
        from IPython.display import display

        width, label, button = self.control_widths()
        widgets = {}
        for name, c in self.controls.items():
            layout = w.Layout(width=width, margin="2px 1.5em 2px 0")
            style: dict[str, str] = {"description_width": label}
            common = dict(options=list(c.options), value=c.default, description=c.label,
                          layout=layout, style=style)
            if c.kind == "toggle":
                style["button_width"] = button
                widgets[name] = w.ToggleButtons(**common, tooltips=[
                    f"{c.label}: {o}" for o in c.options])
            elif c.kind == "dropdown":
                widgets[name] = w.Dropdown(**common)
            else:
                widgets[name] = w.SelectionSlider(**common, continuous_update=False)
        controls = w.HBox(list(widgets.values()), layout=w.Layout(
            flex_flow="row wrap", align_items="center", justify_content="flex-start",
            width="100%"))
        out = w.Output()

        def redraw(**params: Any) -> None:
            with out:
                out.clear_output(wait=True)
                fig = self.render(**params)
                display(fig)
                plt.close(fig)

        ui = _live_box()([controls, out])
        w.interactive_output(redraw, widgets)
        return ui

    def show(self):
        """Live widgets in Jupyter; a JS player in the HTML book."""
        if book_mode():
            from IPython.display import HTML

            return HTML(self.player_html())
        return self.live()
