"""The live explorer in JupyterLab (issue 54 item 16): its controls wrap in a tidy grid, each named
and usable from the keyboard, and its figure titles are at least 11 px at the image's own size."""

from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
import pytest

from course_lib.toolkit import explorer as ex
from course_lib.toolkit.explorer import Control, Explorer


def _small_titles(fig: plt.Figure, ranks: int = 2, **_: object) -> None:
    """Titles drawn too small for a 72-dpi figure: 8 pt is 8 px."""
    axes = fig.subplots(2, 1)
    for r, ax in enumerate(axes):
        ax.bar(range(ranks), range(ranks))
        ax.set_title(f"panel {r}, {ranks} ranks", fontsize=8)
        ax.set_xlabel("rank")
    fig.suptitle("the whole figure", fontsize=7)
    fig.tight_layout()


def _explorer(**kwargs) -> Explorer:
    return Explorer(draw=_small_titles, controls={
        "ranks": Control("ranks", (2, 3, 4), kind="dropdown"),
        "step": Control("step", (0, 1, 2, 3)),
        "layout": Control("shards", ("contiguous", "zigzag"), kind="toggle"),
        "mask": Control("attention mask", ("causal", "none"), kind="toggle"),
    }, dpi=72, **kwargs)


def _title_px(fig: plt.Figure) -> list[float]:
    return [t.get_fontsize() * fig.dpi / 72 for t in ex._titles(fig)]


def test_the_controls_wrap_in_a_tidy_row_of_equal_widths():
    explorer = _explorer()
    ui = explorer.live()
    box = ui.children[0]
    assert isinstance(box, w.HBox)
    assert box.layout.flex_flow == "row wrap"
    assert box.layout.width == "100%"
    controls = list(box.children)
    assert len(controls) == 4
    width, label, button = explorer.control_widths()
    # one width for every control, one column for every name: they line up as they wrap
    assert {c.layout.width for c in controls} == {width}
    assert {c.style.description_width for c in controls} == {label}
    assert float(width.removesuffix("em")) >= ex.CONTROL_MIN_WIDTH_EM
    # the longest name ("attention mask", 14 characters) fits its column
    assert float(label.removesuffix("em")) >= 14 * 0.6
    toggles = [c for c in controls if isinstance(c, w.ToggleButtons)]
    assert len(toggles) == 2 and {t.style.button_width for t in toggles} == {button}
    # two buttons of "contiguous" (10 characters) and the name fit the control's width
    assert (float(label[:-2]) + 2 * float(button[:-2]) <= float(width[:-2])
            and float(button[:-2]) >= 10 * 0.6)


def test_every_control_is_named_and_keyboard_usable():
    ui = _explorer().live()
    controls = list(ui.children[0].children)
    assert [c.description for c in controls] == ["ranks", "step", "shards", "attention mask"]
    for c in controls:
        # ipywidgets' native controls: a <select>, a slider and <button>s, all Tab stops that
        # the arrow keys (slider, select) and Space/Enter (buttons) operate
        assert isinstance(c, w.Dropdown | w.SelectionSlider | w.ToggleButtons)
        assert not c.disabled and not c.description_allow_html
        assert c.layout.display in (None, "", "flex", "inline-flex")
    toggles = [c for c in controls if isinstance(c, w.ToggleButtons)]
    assert toggles[0].tooltips == ("shards: contiguous", "shards: zigzag")


def test_figure_titles_are_at_least_11_px():
    explorer = _explorer()
    fig = explorer.render(ranks=3)
    px = _title_px(fig)
    assert len(px) == 3 and min(px) >= ex.TITLE_MIN_PX >= 11
    # drawn with tight_layout, laid out again around the larger titles: the panels' titles do
    # not run into the panel above
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    upper, lower = fig.axes
    assert lower.title.get_window_extent(renderer).y1 <= upper.get_tightbbox(renderer).y0 + 1
    laid_out = vars(fig.subplotpars).copy()
    fig.tight_layout()                          # the layout already fits the final titles
    assert vars(fig.subplotpars) == pytest.approx(laid_out, abs=2e-3)   # not: top -0.024
    assert fig._suptitle.get_window_extent(renderer).y1 <= fig.bbox.y1 + 1
    plt.close(fig)
    # at a higher dpi the same titles need fewer points; titles already large are left alone
    fig = plt.figure(dpi=144)
    ax = fig.subplots()
    ax.set_title("big", fontsize=14)
    ax.set_xlabel("x")
    assert not ex.legible_titles(fig) and ax.title.get_fontsize() == 14
    ax.set_title("small", fontsize=4)
    assert ex.legible_titles(fig) and ax.title.get_fontsize() * 144 / 72 == pytest.approx(11)
    plt.close(fig)


def test_the_player_draws_the_same_legible_titles(monkeypatch):
    drawn: list[float] = []
    explorer = _explorer(frames=[{"ranks": 2}, {"ranks": 4}])

    def spy(fig, params):
        Explorer._draw(explorer, fig, params)
        drawn.extend(_title_px(fig))

    monkeypatch.setattr(explorer, "_draw", spy)
    html = explorer.player_html()
    assert "course-player" in html and len(drawn) >= 6 and min(drawn) >= 11


@pytest.mark.parametrize("chapter, factory", [
    ("ch05_positions", "rope_explorer"),
    ("ch07_complexity", "cost_explorer"),
    ("ch10_inference", "decoding_explorer"),
    ("ch10_inference", "cache_schemes_explorer"),
    ("ch11_flex_attention", "block_mask_explorer"),
    ("ch13_across_devices", "ring_explorer"),
])
def test_the_chapters_explorers_draw_titles_of_11_px_or_more(chapter, factory):
    """The explorers whose titles were drawn at 9 or 10 px in Lab (chapter 13's is 12 px)."""
    import importlib

    explorer = getattr(importlib.import_module(f"course_lib.chapters.{chapter}.explorer"),
                       factory)()
    fig = explorer.render()
    px = _title_px(fig)
    plt.close(fig)
    assert px and min(px) >= 11, (factory, px)
