"""What a book player (``Explorer.player_html``) costs to make: each frame drawn once and rendered
once. In `make test` the chapters' players are made in nbval's native run (the book's run), where
matplotlib's ``FuncAnimation`` drew the first frame twice and, after saving each frame, rendered the
whole figure again for a screen there is not (``draw_idle``): chapter 6's player of ten frames took
5.0 s, now 3.4 s (AMD EPYC, 2 cores), its HTML the same byte for byte."""

from __future__ import annotations

import base64
import io
import re

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from course_lib.toolkit.explorer import Control, Explorer


def _explorer(calls: list[dict]) -> Explorer:
    def draw(fig, step=0, colour="C0"):
        calls.append({"step": step, "colour": colour})
        ax = fig.subplots()
        ax.plot(range(5), [step * x for x in range(5)], color=colour)
        ax.set_title(f"step {step}")

    return Explorer(draw=draw, controls={"step": Control("step", (1, 2, 3, 4)),
                                         "colour": Control("colour", ("C0", "C1"))},
                    animate="step", figsize=(2, 1.5))


def _frames(html: str) -> list[bytes]:
    return [base64.b64decode(f) for f in
            re.findall(r'data:image/png;base64,([^"]+)"', html.replace("\\n", ""))]


def test_each_frame_is_drawn_once_and_rendered_once(monkeypatch):
    renders = []
    real = FigureCanvasAgg.draw

    def counted(self):
        renders.append(self.figure)
        return real(self)

    monkeypatch.setattr(FigureCanvasAgg, "draw", counted)
    calls: list[dict] = []
    html = _explorer(calls).player_html()
    # the default frame once for the smallest text's size, then each frame of the sweep once
    assert calls == [{"step": 1, "colour": "C0"}] + [{"step": s, "colour": "C0"}
                                                    for s in (1, 2, 3, 4)]
    assert len(renders) == 1 + 4, len(renders)
    assert len(_frames(html)) == 4


@pytest.mark.parametrize("frame", [0, 3])
def test_the_saved_frame_is_the_one_the_explorer_draws(frame):
    """The player's frame ``frame`` is the PNG that :meth:`Explorer.render` gives at the player's
    resolution for the same parameters (nothing drawn ahead or left over changes it)."""
    ex = _explorer([])
    png = _frames(ex.player_html())[frame]
    fig = ex.render(**ex.player_frames()[frame])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=ex.player_dpi())
    matplotlib.pyplot.close(fig)
    assert png == buf.getvalue()
