"""The checks themselves catch what they claim to: a dead player, a remote load, a broken image.

Runs on small pages written into a temporary folder, independent of the chapters' contents.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.animation import FuncAnimation

from .conftest import LocalServer
from .probe import (
    check_figure_captions,
    check_images,
    check_math_fits,
    check_numbered_sections,
    check_players,
    check_widgets,
    open_page,
)


def jshtml(frames_differ: bool) -> str:
    fig, ax = plt.subplots(figsize=(2, 1.5), dpi=40)

    def update(i):
        ax.clear()
        ax.bar([0, 1], [1, 1 + (i if frames_differ else 0)])
        return []

    html = FuncAnimation(fig, update, frames=3, blit=False).to_jshtml(default_mode="once")
    plt.close(fig)
    return html


def write(tmp_path, name, body):
    (tmp_path / name).write_text(f"<!doctype html><html><body><main>{body}</main></body></html>",
                                 encoding="utf-8")


@pytest.mark.browser
def test_probe_catches_dead_player_remote_load_broken_image(tmp_path, browser):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from book_assets import _FA_LINK

    write(tmp_path, "good.html", _FA_LINK.sub("", jshtml(True)))
    write(tmp_path, "dead.html", _FA_LINK.sub("", jshtml(False)))
    write(tmp_path, "remote.html", '<script src="https://cdn.example.org/x.js"></script>'
                                   '<img src="missing.png"><p>VBox(children=(IntSlider(</p>')
    ctx = browser.new_context()
    with LocalServer(tmp_path) as srv:
        good = open_page(ctx, srv.base + "good.html")
        assert good.load_problems() == []
        assert check_players(good.page) == []
        assert check_images(good.page) == []

        dead = open_page(ctx, srv.base + "dead.html")
        assert check_players(dead.page) == ["slider " + dead.page.eval_on_selector(
            "input[type=range]", "e => e.id") + ": frame image did not change"]

        remote = open_page(ctx, srv.base + "remote.html")
        assert remote.remote_requests == ["https://cdn.example.org/x.js"]
        assert any("missing.png" in p for p in remote.failed_requests)
        assert check_images(remote.page) == ["image did not load: missing.png"]
        assert check_widgets(remote.page) == ["raw widget text in the page: 'VBox(children='"]
    ctx.close()


def test_remote_load_scanner():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from book_assets import _FA_LINK, remote_loads

    page = ('<script src="https://cdn.x/a.js"></script><script src="_static/b.js"></script>'
            '<link rel="stylesheet" href="//fonts.x/c.css"><a href="https://github.com/x">x</a>'
            '<img src="data:image/png;base64,AAAA"><style>@import url("https://f.x/d.css")</style>')
    assert remote_loads(page) == ["<script> https://cdn.x/a.js", "<link> //fonts.x/c.css",
                                  "@import https://f.x/d.css"]
    assert remote_loads(_FA_LINK.sub("", jshtml(True))) == []
    assert remote_loads(jshtml(True)) != []  # matplotlib's own output does load from a CDN


@pytest.mark.browser
def test_probe_catches_cut_off_math_uncaptioned_figure_unnumbered_heading(tmp_path, browser):
    wide = '<span style="display:inline-block;width:900px">x</span>'
    math = ('<div class="math" id="eq-{id}"><mjx-container display="true" '
            'style="display:block;max-width:100%;overflow-x:{ov}">' + wide
            + '</mjx-container></div>')
    png = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR4nGNgYAAAA"
           "AMAASsJTYQAAAAASUVORK5CYII=")
    write(tmp_path, "page.html",
          '<div style="width:400px"><article>'
          '<h1><span class="section-number">1. </span>Title</h1><h2>Unnumbered</h2>'
          + math.format(id="hidden", ov="hidden") + math.format(id="scrolls", ov="auto")
          + f'<div class="cell_output"><img src="{png}"></div>'
          + f'<figure><img src="{png}"><figcaption>A caption</figcaption></figure>'
          '</article></div>')
    ctx = browser.new_context(viewport={"width": 1000, "height": 600})
    with LocalServer(tmp_path) as srv:
        page = open_page(ctx, srv.base + "page.html").page
        loose = check_math_fits(page, strict=False)
        assert len(loose) == 1 and loose[0].startswith("eq-hidden:") and "cut off" in loose[0]
        strict = check_math_fits(page, strict=True)
        assert any(p.startswith("eq-scrolls:") and "break it" in p for p in strict)
        assert check_figure_captions(page) == [f"figure without a caption: {png[:80]}"]
        assert check_numbered_sections(page) == ["H2 not numbered: 'Unnumbered'"]
    ctx.close()
