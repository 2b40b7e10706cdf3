"""Open every page of the built book (``_build/html``) in headless Chromium and check it works.

Per page, at a desktop width (1400 px): no console errors or JS exceptions, no failed local
request, no request to a non-local host at all, math rendered by the book's own MathJax, no
display equation cut off or even in need of its scrollbar (long ones are broken into lines), every
image loaded and has a real text alternative, every player slider has a name and changes its
frame and the frame's alt text, no serious or critical axe-core violation of the WCAG 2.1 A/AA
rules (axe-core pinned in package-lock.json, injected from node_modules), no raw widget JSON,
every local link resolves; on a numbered chapter, every figure has a caption and the title and
every section heading carry their number (all checked on the same visit: a page load is most of a
browser test's time; the phone width is test_phone's). Across pages: previous/next navigation
walks the table of contents, and search finds "softmax". With ``make browser SCREENSHOTS=1``, a
full-page screenshot of each chapter goes to ``_build/screenshots/``. Run with ``make browser``
(after ``make book``).
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from .conftest import ROOT, SITE

sys.path.insert(0, str(ROOT / "tools"))
from book_execute import toc_files  # the one reading of _toc.yml

from .probe import (
    DEFAULT_TIMEOUT_MS,
    check_axe,
    check_figure_captions,
    check_image_alts,
    check_images,
    check_math,
    check_math_fits,
    check_numbered_sections,
    check_players,
    check_widgets,
    open_page,
)

NOT_PAGES = {"_static", "_sources", "_images", "mathjax", "jupyter_execute",
             "_sphinx_design_static", "_panels_static"}


def site_pages() -> list[str]:
    if not SITE.is_dir():
        return ["index.html"]  # the `site` fixture then skips (or fails in CI) with a message
    pages = [p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
             if not NOT_PAGES.intersection(p.relative_to(SITE).parts)]
    return sorted(p for p in pages if p != "index.html")  # index.html: a redirect, tested apart


def toc_order() -> list[str]:
    """Pages in reading order according to _toc.yml (root first)."""
    return [re.sub(r"\.(md|ipynb)$", "", d) + ".html" for d in toc_files(ROOT)]


def is_chapter(page: str) -> bool:
    return bool(re.match(r"book/\d\d_[^/]+\.html$", page)) or page == "book/intro.html"


def numbered_chapters() -> list[str]:
    """The chapter pages (book/NN_name.html) in the order of _toc.yml."""
    return [p for p in toc_order() if re.match(r"book/\d\d_[^/]+\.html$", p)]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag in ("img", "script") and a.get("src"):
            self.hrefs.append(a["src"])
        if tag == "link" and a.get("href"):
            self.hrefs.append(a["href"])


def broken_local_links(page: str) -> list[str]:
    parser = _Links()
    parser.feed((SITE / page).read_text(encoding="utf-8"))
    base = (SITE / page).parent
    broken = []
    for href in sorted(set(parser.hrefs)):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or not parts.path:  # external, mailto, data, #anchor
            continue
        target = (base / unquote(parts.path)).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            broken.append(href)
    return broken


#: The desktop viewport: the width at which no display equation may need scrolling.
DESKTOP = {"width": 1400, "height": 900}


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport=DESKTOP)
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.mark.browser
@pytest.mark.parametrize("page_path", site_pages())
def test_page(page_path, site, server, context, screenshots_dir):
    visit = open_page(context, server.base + page_path)
    page = visit.page
    problems = []
    problems += check_math(page)
    problems += check_math_fits(page, strict=True)
    problems += check_images(page)
    problems += check_widgets(page)
    if page_path in numbered_chapters():    # read before the players' sliders move
        problems += check_figure_captions(page)
        problems += check_numbered_sections(page)
    problems += check_image_alts(page)
    problems += check_players(page)
    problems += check_axe(page)     # WCAG 2.1 A/AA, serious or critical: none
    problems += [f"broken local link: {h}" for h in broken_local_links(page_path)]
    # late console errors (fonts, deferred scripts): wait for the fonts to finish, then a moment
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_timeout(200)
    problems = visit.load_problems() + problems
    if screenshots_dir is not None and is_chapter(page_path):
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=str(screenshots_dir / (Path(page_path).stem + ".png")),
                        full_page=True)
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


def nav_links(page: str) -> tuple[str | None, str | None]:
    """(previous, next) targets of a page's prev/next buttons, as site-relative paths."""
    html = (SITE / page).read_text(encoding="utf-8")
    found = {}
    for cls in ("left-prev", "right-next"):
        m = re.search(r'<a[^>]*class="[^"]*\b' + cls + r'\b[^"]*"[^>]*>', html)
        href = re.search(r'href="([^"#]*)', m.group(0)).group(1) if m else None
        target = ((SITE / page).parent / href).resolve() if href else None
        found[cls] = target.relative_to(SITE.resolve()).as_posix() if target else None
    return found["left-prev"], found["right-next"]


@pytest.mark.browser
def test_prev_next_chain_follows_toc(site):
    """Every page's next button leads to the following page of _toc.yml, previous to the one
    before; the first page has no previous, the last no next."""
    expected = toc_order()
    for i, page in enumerate(expected):
        prev, nxt = nav_links(page)
        assert prev == (expected[i - 1] if i else None), f"{page}: previous -> {prev}"
        assert nxt == (expected[i + 1] if i + 1 < len(expected) else None), f"{page}: next -> {nxt}"


@pytest.mark.browser
def test_prev_next_buttons_navigate(site, server, context):
    """Clicking the buttons in the browser really navigates (landing -> ch. 1 -> ch. 2 -> back)."""
    expected = toc_order()
    visit = open_page(context, server.base + expected[0])
    page = visit.page
    for target, selector in [(expected[1], "a.right-next"), (expected[2], "a.right-next"),
                             (expected[1], "a.left-prev")]:
        # the click leaves a page that may still be fetching (MathJax fonts): those aborts are
        # the navigation's, not failures; any other failed request still is (see probe.Visit)
        with visit.navigation(wait_until="domcontentloaded"):
            page.click(selector)
        assert page.url.removeprefix(server.base).split("#")[0] == target
    assert not visit.load_problems(), visit.load_problems()


@pytest.mark.browser
def test_index_redirects_to_landing_page(site, server, context):
    page = context.new_page()
    with page.expect_navigation(url=re.compile(r".*/book/intro\.html$")):
        page.goto(server.base + "index.html")
    assert page.title().startswith("Self-Attention, Executed")


@pytest.mark.browser
def test_search_finds_softmax(site, server, context):
    visit = open_page(context, server.base + "search.html?q=softmax")
    page = visit.page
    page.wait_for_selector("#search-results ul.search li")
    hits = page.eval_on_selector_all("#search-results ul.search li a",
                                     "els => els.map(e => e.getAttribute('href'))")
    assert hits, "search for 'softmax' returned no results"
    assert any("softmax" in h or "glossary" in h for h in hits), hits
    assert not visit.load_problems(), visit.load_problems()


@pytest.mark.browser
def test_every_toc_page_was_built(site):
    missing = [p for p in toc_order() if not (site / p).is_file()]
    assert not missing, f"pages in _toc.yml missing from the build: {missing}"


@pytest.mark.browser
def test_players_respect_reduced_motion(site, server, browser):
    """With the reader's "reduce motion" setting, a player shows no button that animates (play,
    play backwards, pause, speed, loop mode), only the slider and the step buttons; no player
    starts by itself either way (the frame does not change while nobody touches it)."""
    chapters = [p for p in numbered_chapters() if (SITE / p).is_file()
                and "course-player" in (SITE / p).read_text(encoding="utf-8")]
    if not chapters:
        pytest.skip("no player in the built book")
    ctx = browser.new_context(viewport=DESKTOP, reduced_motion="reduce")
    try:
        page = open_page(ctx, server.base + chapters[0]).page
        player = page.locator(".course-player").first
        player.scroll_into_view_if_needed()
        img = player.locator("img").first
        page.wait_for_function("(img) => !!img.getAttribute('src')", arg=img.element_handle())
        first = img.get_attribute("src")
        for name in ("Play", "Play backwards", "Pause", "Increase speed", "Decrease speed"):
            assert not player.locator(f'button[aria-label="{name}"]').is_visible(), name
        for name in ("First frame", "Previous frame", "Next frame", "Last frame"):
            assert player.locator(f'button[aria-label="{name}"]').is_visible(), name
        assert player.locator("input[type=range]").is_visible()
        page.wait_for_timeout(1500)                                  # > two frame intervals
        assert img.get_attribute("src") == first, "the player advanced by itself"
        # keyboard: focus the slider and step with the arrow key: the frame and its alt follow
        alt = img.get_attribute("alt")
        player.locator("input[type=range]").focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(100)
        assert img.get_attribute("src") != first and img.get_attribute("alt") != alt
    finally:
        ctx.close()
