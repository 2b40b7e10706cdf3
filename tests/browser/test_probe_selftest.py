"""The checks themselves catch what they claim to: a dead player, a remote load, a broken image.

Runs on small pages written into a temporary folder, independent of the chapters' contents.
"""

from __future__ import annotations

import socket
import threading
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.animation import FuncAnimation

from .conftest import LocalServer, _QuietHandler
from .probe import (
    check_axe,
    check_figure_captions,
    check_image_alts,
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


def course_player() -> str:
    """The book's player (``Explorer.player_html``): named slider, alt text per frame."""
    from course_lib.toolkit.explorer import Control, Explorer

    def draw(fig, h=1):
        ax = fig.subplots()
        ax.bar(["a", "b"], [1, h])
        ax.set_title(f"bar b at height {h}")

    return Explorer(draw=draw, controls={"h": Control("height", (1, 2, 3))},
                    figsize=(2, 1.5)).player_html()


def write(tmp_path, name, body):
    (tmp_path / name).write_text('<!doctype html><html lang="en"><head><title>probe</title>'
                                 f"</head><body><main>{body}</main></body></html>",
                                 encoding="utf-8")


@pytest.mark.browser
def test_probe_catches_dead_player_remote_load_broken_image(tmp_path, browser):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from book_assets import _FA_LINK

    write(tmp_path, "good.html", _FA_LINK.sub("", course_player()))
    write(tmp_path, "raw.html", _FA_LINK.sub("", jshtml(True)))
    write(tmp_path, "dead.html", _FA_LINK.sub("", jshtml(False)))
    write(tmp_path, "remote.html", '<script src="https://cdn.example.org/x.js"></script>'
                                   '<img src="missing.png"><p>VBox(children=(IntSlider(</p>')
    ctx = browser.new_context()
    with LocalServer(tmp_path) as srv:
        good = open_page(ctx, srv.base + "good.html")
        assert good.load_problems() == []
        assert check_players(good.page) == []
        assert check_images(good.page) == []
        assert check_image_alts(good.page) == []
        assert check_axe(good.page) == []

        # matplotlib's own player: an unnamed slider and a frame without alt text
        raw = open_page(ctx, srv.base + "raw.html")
        slider = raw.page.eval_on_selector("input[type=range]", "e => e.id")
        assert check_players(raw.page) == [f"slider {slider}: slider has no accessible name"]
        assert [p.split(":")[0] for p in check_image_alts(raw.page)] == ["image without alt text"]
        assert {p.split(" (")[0] for p in check_axe(raw.page)} == {"axe image-alt", "axe label"}

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


class _HoldingHandler(_QuietHandler):
    """Serves files, except ``/held*``: those requests are announced (``arrived``) and answered
    only once the test sets ``release`` - so a request is surely in flight when the test acts."""

    arrived: dict[str, threading.Event] = {}
    release = threading.Event()

    def do_GET(self) -> None:
        if self.path.startswith("/held"):
            self.arrived.setdefault(self.path, threading.Event()).set()
            self.release.wait(timeout=600)
            try:
                super().do_GET()
            except OSError:  # the browser has hung up (aborted): nothing to answer
                pass
            return
        super().do_GET()

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass


def _until(page, condition, what: str, limit_s: float = 120) -> None:
    """Wait for ``condition()`` while letting Playwright dispatch events (no fixed sleep)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        page.wait_for_timeout(20)


def _in_flight(visit, path: str, js: str) -> None:
    """Start a request for ``path`` in the page with ``js`` and wait until the server holds it."""
    visit.page.evaluate(js)
    _until(visit.page, lambda: path in _HoldingHandler.arrived, f"{path} to reach the server")


@pytest.mark.browser
def test_probe_excuses_only_aborts_of_pages_the_test_left(tmp_path, browser):
    """Leaving a page (click, goto) aborts its pending requests: not failures. A 404, a refused
    connection, and an abort in the page the test is still on are failures, and stay failures
    after the test navigates away."""
    # an inline icon: no /favicon.ico request racing the navigations
    for name, link in [("a.html", '<a id="next" href="b.html">next</a>'),
                       ("b.html", '<a id="prev" href="a.html">prev</a>')]:
        (tmp_path / name).write_text('<!doctype html><html><head><link rel="icon" href="data:,">'
                                     f"</head><body>{link}</body></html>", encoding="utf-8")
    # a port that refuses connections: bound (so nobody else takes it) but not listening
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{closed.getsockname()[1]}/font.woff"
    _HoldingHandler.arrived.clear()
    _HoldingHandler.release.clear()
    ctx = browser.new_context()
    try:
        with LocalServer(tmp_path, _HoldingHandler) as srv:
            visit = open_page(ctx, srv.base + "a.html")
            add_img = "src => { const i = new Image(); i.src = src; document.body.append(i); }"

            # 1. a request pending when the test clicks "next": aborted by the navigation
            _in_flight(visit, "/held-1.png", f"() => ({add_img})('held-1.png')")
            with visit.navigation():
                visit.page.click("#next")
            _until(visit.page, lambda: visit.failures, "the abort to be reported")
            assert [f.error for f in visit.failures] == ["net::ERR_ABORTED"]
            assert visit.failed_requests == [] and visit.load_problems() == []
            assert visit.excused_aborts == [f"{srv.base}held-1.png (net::ERR_ABORTED)"]

            # 2. real failures on the page the test is on: a 404, a refused connection, and a
            # request the page itself aborts (same error text as 1, but no navigation by the test)
            visit.page.evaluate(f"() => ({add_img})('missing.png')")
            visit.page.evaluate(f"() => ({add_img})({refused!r})")
            _in_flight(visit, "/held-2.txt",
                       "() => { window.ac = new AbortController(); "
                       "fetch('held-2.txt', {signal: ac.signal}).catch(() => {}); }")
            visit.page.evaluate("() => ac.abort()")
            _until(visit.page, lambda: len(visit.failures) == 4, "three more failures")
            expected = {f"{srv.base}missing.png (HTTP 404)",
                        f"{refused} (net::ERR_CONNECTION_REFUSED)",
                        f"{srv.base}held-2.txt (net::ERR_ABORTED)"}
            assert set(visit.failed_requests) == expected

            # 3. the test leaves that page with goto while another request is pending: that abort
            # is excused, the three real failures of the page it left are still reported
            _in_flight(visit, "/held-3.png", f"() => ({add_img})('held-3.png')")
            visit.goto(srv.base + "a.html")
            _until(visit.page, lambda: len(visit.failures) == 5, "the second abort")
            assert set(visit.failed_requests) == expected
            assert {f"failed local request: {m}" for m in expected} <= set(visit.load_problems())
            assert sorted(visit.excused_aborts) == [f"{srv.base}held-1.png (net::ERR_ABORTED)",
                                                    f"{srv.base}held-3.png (net::ERR_ABORTED)"]
            _HoldingHandler.release.set()
    finally:
        _HoldingHandler.release.set()
        closed.close()
        ctx.close()
