"""The book by keyboard alone (issue 54), at the desktop width.

* No formula is a Tab stop (MathJax 3 makes every one of them one unless told otherwise:
  ``tools/book_assets.keyboard_mathjax``), so chapter 13's first slider is a few dozen Tab presses
  from the top of its page, not 138.
* Every button of the article header (sidebar toggle, launch, repository, download with the
  workbook, full screen, colour mode, contents) shows where focus is when Tab reaches it: an
  outline at least 2 px wide, or a focus ring drawn as a box shadow (``book/_static/course.css``).
"""

from __future__ import annotations

import pytest

from .probe import DEFAULT_TIMEOUT_MS, check_math, open_page

DESKTOP = {"width": 1400, "height": 900}
CHAPTER_13 = "book/13_across_devices.html"

#: Tab presses from the top of chapter 13 to its first slider: the skip link, the sidebar's
#: links, the header's buttons, then the chapter's own links, folds, copy buttons and scrolling
#: boxes before its explorer (72 measured at 1400 px, 138 while every formula was a Tab stop).
MAX_TAB_PRESSES = 90

_ACTIVE = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  return {
    tag: el.tagName.toLowerCase(),
    name: (el.getAttribute('aria-label') || el.getAttribute('title') || el.textContent || '')
      .trim().slice(0, 40),
    slider: el.matches('.course-player input[type=range]'),
    math: !!el.closest('mjx-container') && !el.classList.contains('course-scrolls'),
    header: !!el.closest('.bd-header-article'),
    outline: style.outlineStyle === 'none' ? 0 : parseFloat(style.outlineWidth),
    shadow: style.boxShadow,
  };
}"""


@pytest.fixture
def chapter_13(site, server, browser):
    if not (site / CHAPTER_13).is_file():
        pytest.skip(f"{CHAPTER_13} not built")
    ctx = browser.new_context(viewport=DESKTOP)
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = open_page(ctx, server.base + CHAPTER_13).page
    assert not check_math(page)                       # MathJax has typeset every formula
    yield page
    ctx.close()


def _tab_until_slider(page, limit: int = 400) -> list[dict]:
    """Press Tab from the top of the page until the first player's slider has focus (or
    ``limit`` presses); returns what had focus after each press."""
    page.evaluate("() => { window.scrollTo(0, 0); document.activeElement?.blur(); }")
    seen = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        seen.append(page.evaluate(_ACTIVE) or {})
        if seen[-1].get("slider"):
            break
    return seen


@pytest.mark.browser
def test_math_is_no_tab_stop_and_the_first_slider_is_near(chapter_13):
    page = chapter_13
    n_math = page.evaluate("() => document.querySelectorAll('mjx-container').length")
    # a display equation wider than the column stays one: it scrolls by keyboard (course.js)
    focusable = page.evaluate("() => [...document.querySelectorAll('mjx-container')]"
                              ".filter(e => e.tabIndex >= 0 && !e.classList.contains("
                              "'course-scrolls')).length")
    assert n_math > 50 and focusable == 0, f"{focusable} of {n_math} formulas are Tab stops"
    seen = _tab_until_slider(page)
    assert seen and seen[-1].get("slider"), "Tab never reached chapter 13's first slider"
    assert not any(s.get("math") for s in seen)
    print(f"Tab presses to chapter 13's first slider: {len(seen)}")
    assert len(seen) <= MAX_TAB_PRESSES, len(seen)


@pytest.mark.browser
def test_header_buttons_show_where_focus_is(chapter_13):
    seen = _tab_until_slider(chapter_13)
    header = [s for s in seen if s.get("header")]
    assert len(header) >= 4, header                   # toggle, launch, repository, download, ...
    unseen = [s["name"] or s["tag"] for s in header
              if s["outline"] < 2 and s["shadow"] in ("none", "")]
    assert not unseen, f"header buttons with no focus indicator: {unseen}"
