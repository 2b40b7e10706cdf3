"""One explorer abstraction that renders live in Jupyter and as a JS player in the HTML book.

An explorer is a pure drawing function ``draw(fig, **params)`` plus its controls. In Jupyter,
:meth:`Explorer.show` returns live ipywidgets; when the book is built (``make book`` exports
``COURSE_LIB_BOOK=1``) it returns a matplotlib *jshtml* player over precomputed frames, so every
slider in the HTML actually changes what is shown. ``draw`` is what the tests call headlessly.
"""

from __future__ import annotations

import functools
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
    ``frames`` may instead list the exact parameter dicts the player shows.
    """

    draw: Callable[..., None]
    controls: dict[str, Control]
    animate: str | None = None
    frames: list[dict[str, Any]] | None = None
    figsize: tuple[float, float] = (8.0, 3.5)
    interval_ms: int = 600
    dpi: int = 72

    def defaults(self) -> dict[str, Any]:
        return {name: c.default for name, c in self.controls.items()}

    def render(self, **params: Any) -> plt.Figure:
        """Draw one frame into a new figure (used by tests and static output)."""
        full = {**self.defaults(), **params}
        fig = plt.figure(figsize=self.figsize, dpi=self.dpi)
        self.draw(fig, **full)
        return fig

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

    def player_dpi(self) -> int:
        """``dpi``, raised so the smallest text is :data:`PLAYER_MIN_TEXT_PX` high (1 pt = dpi/72
        px)."""
        return max(self.dpi, math.ceil(72 * PLAYER_MIN_TEXT_PX / self.smallest_text_pt()))

    def player_html(self) -> str:
        """A self-contained HTML/JS player (slider + buttons) over precomputed frames, wrapped in
        ``<div class="course-player" data-min-text-px=...>`` (the smallest text at natural size)."""
        frames = self.player_frames()
        dpi = self.player_dpi()
        min_px = self.smallest_text_pt() * dpi / 72
        fig = plt.figure(figsize=self.figsize, dpi=dpi)

        def update(i: int):
            fig.clear()
            self.draw(fig, **frames[i])
            return []

        anim = FuncAnimation(fig, update, frames=len(frames), interval=self.interval_ms,
                             blit=False, repeat=False)
        html = anim.to_jshtml(default_mode="once")
        plt.close(fig)
        html = re.sub(r'(<img id="_anim_img\w+">)', r'<div class="course-player-frame">\1</div>',
                      html, count=1)
        return f'<div class="course-player" data-min-text-px="{min_px:.1f}">{html}</div>'

    def live(self):
        """Live ipywidgets: one widget per control, the figure redrawn on every change."""
        import ipywidgets as w
        from IPython.display import display

        widgets = {}
        for name, c in self.controls.items():
            if c.kind == "toggle":
                widgets[name] = w.ToggleButtons(options=list(c.options), value=c.default,
                                                description=c.label)
            elif c.kind == "dropdown":
                widgets[name] = w.Dropdown(options=list(c.options), value=c.default,
                                           description=c.label)
            else:
                widgets[name] = w.SelectionSlider(options=list(c.options), value=c.default,
                                                  description=c.label, continuous_update=False)
        out = w.Output()

        def redraw(**params: Any) -> None:
            with out:
                out.clear_output(wait=True)
                fig = self.render(**params)
                display(fig)
                plt.close(fig)

        ui = _live_box()([w.HBox(list(widgets.values()), layout=w.Layout(flex_flow="row wrap")),
                          out])
        w.interactive_output(redraw, widgets)
        return ui

    def show(self):
        """Live widgets in Jupyter; a JS player in the HTML book."""
        if book_mode():
            from IPython.display import HTML

            return HTML(self.player_html())
        return self.live()
