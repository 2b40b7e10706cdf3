"""The HTML book on a phone (390 px wide), page by page, and its sidebar toggles on a desktop.

* The article header's toggles open and close the sidebars: the hamburger the site navigation,
  the list icon the page contents (pydata-sphinx-theme issue #2451; book/_static/course.js).
* No page scrolls sideways, and nothing sticks out of the screen except inside the boxes that
  scroll on their own: code blocks, display math, tables and players' frames.
* Every equation is rendered and none is cut off: a display equation wider than the screen
  stays inside the text column and can be scrolled to (at 1400 px none may need scrolling:
  test_book_in_browser's ``test_page``).
* Every player's text is at least 10 px high as shown (``data-min-text-px`` of
  ``course_lib.toolkit.explorer.Explorer.player_html`` times the image's display scale).
* Accessible at this width too: no serious or critical axe-core violation of the WCAG 2.1 A/AA
  rules. The rules that read colours (text contrast, links told by colour) run on the page's
  frame (header, sidebars, footer: the themes give them other colours by width) but not inside
  the article, whose colours are shown to be those ``test_page`` checks at 1400 px: every
  element of the article and each element around it has the same text and background colour,
  opacity, decoration, text size class (large or not) and visibility at both widths (one
  axe-core run takes 4-8 s on a long chapter, its colour rules about two thirds). Every box that
  scrolls sideways is reachable by keyboard, named, and shades the edge where more content hides
  (the scroll cue); an open navigation drawer dims the page behind it.
"""

from __future__ import annotations

import pytest

from .probe import (
    check_axe,
    check_math,
    check_math_fits,
    check_scroll_cues,
    dialog_backdrop,
    open_page,
)
from .test_book_in_browser import DESKTOP, site_pages

PHONE = {"width": 390, "height": 844}
MIN_TEXT_PX = 10.0
# Boxes that may hold content wider than the screen: they scroll (or clip) by themselves.
SCROLLERS = ("pre, .highlight, mjx-container, div.math, .course-player-frame, table, "
             ".pst-scrollable-table-container, .table-wrapper, dialog, .bd-sidebar-primary, "
             ".bd-sidebar-secondary, .bd-header, .search-button__wrapper")

_OVERFLOW_JS = """
(scrollers) => {
  const W = document.documentElement.clientWidth;
  const out = [];
  document.querySelectorAll('.bd-main *').forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1 || el.closest(scrollers)) return;
    out.push(`${el.tagName.toLowerCase()}.${String(el.className).slice(0, 40)} sticks out ` +
             `${Math.round(r.right - W)} px: ${(el.innerText || '').slice(0, 60)}`);
  });
  return {scroll: document.documentElement.scrollWidth - W, out: out.slice(0, 5)};
}
"""

_PLAYER_TEXT_JS = """
() => Array.from(document.querySelectorAll('.course-player'), (player, i) => {
  const img = player.querySelector('img');
  const scale = img && img.naturalWidth ? img.getBoundingClientRect().width / img.naturalWidth : 0;
  return {i, px: parseFloat(player.dataset.minTextPx) * scale, scale};
})
"""


#: Where the colour rules of axe-core do not run at 390 px (see the module's docstring).
ARTICLE = "article.bd-article"

# What decides a text's contrast, per element of the article and each element around it: its
# text and background colours, opacity, blending and decoration, whether it counts as large text
# for WCAG (24 px, or 18.66 px bold) and whether it is shown. ``keep``: remember them (at this
# width); else compare with those remembered and return what differs (null: no article).
_ARTICLE_COLOURS_JS = """
([article, keep]) => {
  const root = document.querySelector(article);
  if (!root) return null;
  const els = [];
  for (let a = root.parentElement; a; a = a.parentElement) els.unshift(a);
  els.push(root, ...root.querySelectorAll('*'));
  const looks = els.map(el => {
    const s = getComputedStyle(el);
    const size = parseFloat(s.fontSize), bold = parseInt(s.fontWeight, 10) >= 700;
    const shown = s.display !== 'none' && s.visibility !== 'hidden' &&
                  el.getClientRects().length > 0;
    return [s.color, s.backgroundColor, s.backgroundImage, s.opacity, s.mixBlendMode, s.filter,
            s.textDecorationLine, size >= 24 || (bold && size >= 18.66), shown].join(' | ');
  });
  if (keep) {
    window.courseArticleLooks = looks;
    return [];
  }
  const before = window.courseArticleLooks;
  if (before.length !== looks.length) return [`${before.length} elements, then ${looks.length}`];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ?
     '.' + el.className.trim().split(/\\s+/).slice(0, 2).join('.') : '');
  return looks.flatMap((look, i) => look === before[i] ? [] :
                       [`${name(els[i])}: ${before[i]}, then ${look}`]);
}
"""


def check_article_colours_as_on_a_desktop(page) -> list[str]:
    """The article's colours at this width are those at 1400 px (:data:`_ARTICLE_COLOURS_JS`);
    the page is shown at 1400 px for the comparison, then at this width again."""
    here = page.viewport_size
    if page.evaluate(_ARTICLE_COLOURS_JS, [ARTICLE, True]) is None:
        return []           # no article (the search page): the colour rules ran on all of it
    page.set_viewport_size(DESKTOP)
    try:
        differ = page.evaluate(_ARTICLE_COLOURS_JS, [ARTICLE, False])
    finally:
        page.set_viewport_size(here)
    return [f"{len(differ)} element(s) of the article change colour, decoration or visibility "
            f"between {here['width']} and {DESKTOP['width']} px (axe's colour rules check "
            f"the article at {DESKTOP['width']} px only): " + "; ".join(differ[:3])
            ] if differ else []


def _visible(page, selector: str):
    return page.locator(selector).filter(visible=True).first


def _toggle_opens_dialog(page, button: str, dialog: str) -> str | None:
    """Click ``button``: ``dialog`` must open, and Escape must close it. None if it works."""
    toggle = _visible(page, button)
    if toggle.count() == 0:
        return f"no visible {button}"
    toggle.click()
    try:
        page.wait_for_function(f"() => document.querySelector('{dialog}').open", timeout=5000)
    except Exception:
        return f"{button} did not open {dialog}"
    backdrop = dialog_backdrop(page, dialog)
    if backdrop in ("rgba(0, 0, 0, 0)", "transparent"):
        return f"{dialog} opens with no dimmed backdrop behind it"
    page.keyboard.press("Escape")
    try:
        page.wait_for_function(f"() => !document.querySelector('{dialog}').open", timeout=5000)
    except Exception:
        return f"Escape did not close {dialog}"
    return None


@pytest.fixture
def phone(browser):
    ctx = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True,
                              has_touch=True)
    yield ctx
    ctx.close()


@pytest.mark.browser
@pytest.mark.parametrize("page_path", site_pages())
def test_a_page_on_a_phone(page_path, site, server, phone):
    page = open_page(phone, server.base + page_path).page
    problems = check_math(page) + check_math_fits(page, strict=False)

    overflow = page.evaluate(_OVERFLOW_JS, SCROLLERS)
    if overflow["scroll"] > 0:
        problems.append(f"the page scrolls sideways by {overflow['scroll']} px")
    problems += overflow["out"]

    problems += check_scroll_cues(page)
    problems += check_axe(page, colour_outside=ARTICLE)  # WCAG 2.1 A/AA, serious/critical: none

    for player in page.evaluate(_PLAYER_TEXT_JS):
        if player["px"] < MIN_TEXT_PX:
            problems.append(f"player {player['i']}: smallest text {player['px']:.1f} px "
                            f"(frame shown at {player['scale']:.2f} of its size)")

    problem = _toggle_opens_dialog(page, ".bd-header-article .primary-toggle",
                                   "#pst-primary-sidebar-modal")
    if problem:
        problems.append(problem)
    if page.locator(".bd-header-article .secondary-toggle").filter(visible=True).count():
        problem = _toggle_opens_dialog(page, ".bd-header-article .secondary-toggle",
                                       "#pst-secondary-sidebar-modal")
        if problem:
            problems.append(problem)
    elif page.locator("#pst-page-toc-nav").count():
        problems.append("the page has contents but no visible page-contents toggle")
    problems += check_article_colours_as_on_a_desktop(page)     # last: it resizes the page
    assert not problems, f"{page_path} at 390 px:\n  " + "\n  ".join(problems)


@pytest.mark.browser
@pytest.mark.parametrize("page_path", ["book/intro.html", "book/08_flash.html"])
def test_the_hamburger_hides_and_shows_the_sidebar_on_a_desktop(page_path, site, server,
                                                                browser):
    ctx = browser.new_context(viewport=DESKTOP)
    try:
        page = open_page(ctx, server.base + page_path).page
        sidebar = page.locator("#pst-primary-sidebar")
        assert sidebar.is_visible()
        toggle = _visible(page, ".bd-header-article .primary-toggle")
        # hidden: slid out to the left and made invisible (sphinx-book-theme's pst-sidebar-hidden)
        shown = ("() => { const s = document.querySelector('#pst-primary-sidebar'); return "
                 "getComputedStyle(s).visibility === 'visible' && "
                 "s.getBoundingClientRect().right > 0; }")
        toggle.click()
        page.wait_for_function(f"() => !({shown})()", timeout=5000)      # hidden
        toggle.click()
        page.wait_for_function(shown, timeout=5000)                       # back
    finally:
        ctx.close()
