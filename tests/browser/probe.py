"""What the browser test checks on one page, as reusable functions (also self-tested).

``visit`` opens a URL in a fresh context and records everything that went wrong while loading it;
the ``check_*`` functions inspect the loaded page and return a list of problems (empty = fine).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Upper bounds for waits in the browser: generous, since a loaded machine is slow, and a passing
# page never waits them out (every wait is for a condition, never a fixed time).
DEFAULT_TIMEOUT_MS = 120_000

# Text nodes under these elements are code, not prose: raw TeX there is fine.
_VISIBLE_TEXT_JS = """
() => {
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'TEXTAREA', 'NOSCRIPT', 'MJX-CONTAINER',
                        'MJX-ASSISTIVE-MML']);
  const root = document.querySelector('main') || document.body;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const out = [];
  let node;
  while ((node = walker.nextNode())) {
    let el = node.parentElement, code = false;
    while (el && el !== root.parentElement) {
      if (skip.has(el.tagName) || el.classList.contains('highlight')) { code = true; break; }
      el = el.parentElement;
    }
    if (!code) out.push(node.textContent);
  }
  return out.join('\\n');
}
"""

RAW_TEX = [r"$$", r"\(", r"\)", r"\[", r"\]", r"\begin{", r"\frac{", r"\mathrm{", r"\sqrt{",
           r"\sum_", r"\mathbb{", r"\top"]
RAW_WIDGET = [
    re.compile(r"application/vnd\.jupyter\.widget"),
    re.compile(r"\"model_id\"\s*:"),
    re.compile(r"\b(VBox|HBox|interactive|IntSlider|FloatSlider|SelectionSlider)\(children="),
    re.compile(r"\b(IntSlider|FloatSlider|SelectionSlider|Dropdown|ToggleButtons)\(value="),
    re.compile(r"Loading widget\.\.\."),
]

_PLAYERS_JS = """
async () => {
  const res = [];
  for (const s of document.querySelectorAll('input[type=range]')) {
    const box = s.closest('.animation') || s.closest('.cell_output') || s.parentElement;
    const img = box ? box.querySelector('img') : null;
    if (!img) { res.push({id: s.id, ok: false, why: 'no image next to the slider'}); continue; }
    const min = s.min === '' ? 0 : Number(s.min);
    const max = s.max === '' ? 100 : Number(s.max);
    const before = img.getAttribute('src') || '';
    if (!before) { res.push({id: s.id, ok: false, why: 'player shows no frame'}); continue; }
    const altBefore = img.getAttribute('alt') || '';
    const target = Number(s.value) === max ? min : max;
    s.value = String(target);
    s.dispatchEvent(new Event('input', {bubbles: true}));
    s.dispatchEvent(new Event('change', {bubbles: true}));
    await new Promise(r => setTimeout(r, 100));
    const after = img.getAttribute('src') || '';
    const altAfter = img.getAttribute('alt') || '';
    const named = !!(s.getAttribute('aria-label') || s.labels.length);
    res.push({id: s.id, ok: after !== '' && after !== before && named && altAfter !== '' &&
                            altAfter !== altBefore, min, max,
              why: min === max ? 'slider has a single position' :
                   (after === before ? 'frame image did not change' :
                    (!named ? 'slider has no accessible name' :
                     (altAfter === altBefore ? 'frame alt text did not follow the frame (' +
                      JSON.stringify(altAfter.slice(0, 60)) + ')' : '')))});
  }
  return res;
}
"""


@dataclass
class FailedRequest:
    """A local request that did not complete: its URL, Chromium's error text (or the HTTP status),
    the main-frame document it was made in (a count of main-frame navigations, see ``Visit``),
    whether it was itself a navigation, and whether it failed after the test began to leave its
    document."""

    url: str
    error: str
    document: int = -1
    navigation: bool = False
    after_leaving: bool = False

    def __str__(self) -> str:
        return f"{self.url} ({self.error})"


# Chromium's error text for a load cancelled, e.g. by its own document going away (navigation).
NAVIGATION_ABORT = "net::ERR_ABORTED"


@dataclass
class Visit:
    """A loaded page plus what went wrong while loading it.

    Each main-frame document gets a number (``document``: how many main-frame navigations had
    committed when a request was made). A request aborted (``net::ERR_ABORTED``) after the test
    itself began to navigate away from its document (``with visit.navigation(): page.click(...)``
    or ``visit.goto(url)``) is normal browser behaviour, not a failure; every other failed local
    request is: an abort in a document the test did not leave (or before it left), and any other
    error anywhere.
    """

    page: object
    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    remote_requests: list[str] = field(default_factory=list)
    failures: list[FailedRequest] = field(default_factory=list)
    document: int = 0
    left_documents: set[int] = field(default_factory=set)

    def _left_behind(self, f: FailedRequest) -> bool:
        return f.error == NAVIGATION_ABORT and not f.navigation and f.after_leaving

    @property
    def failed_requests(self) -> list[str]:
        """Failed local requests, minus aborts of documents the test navigated away from."""
        return [str(f) for f in self.failures if not self._left_behind(f)]

    @property
    def excused_aborts(self) -> list[str]:
        """The aborts ``failed_requests`` leaves out (for reports and the self-test)."""
        return [str(f) for f in self.failures if self._left_behind(f)]

    @contextmanager
    def navigation(self, **expect_kwargs) -> Iterator[None]:
        """Wrap an action of the test that navigates this page (a click on a link): the document
        being left is recorded, so aborts of its pending requests are not failures."""
        self.left_documents.add(self.document)
        with self.page.expect_navigation(**expect_kwargs):
            yield

    def goto(self, url: str, wait_until: str = "load") -> None:
        """Navigate this page to ``url`` as an action of the test (see ``navigation``)."""
        self.left_documents.add(self.document)
        self.page.goto(url, wait_until=wait_until)

    def load_problems(self) -> list[str]:
        return ([f"console error: {m}" for m in self.console_errors]
                + [f"JavaScript exception: {m}" for m in self.page_errors]
                + [f"failed local request: {m}" for m in self.failed_requests]
                + [f"request to a non-local host: {m}" for m in self.remote_requests])


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "javascript"):
        return True
    return parts.hostname in LOCAL_HOSTS


def open_page(context, url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Visit:
    """Open ``url`` in ``context``; block (and record) every request to a non-local host."""
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    visit = Visit(page=page, url=url)
    made_in: dict[object, int] = {}  # request -> the document it was made in

    def route(r):
        if is_local(r.request.url):
            r.continue_()
        else:
            visit.remote_requests.append(r.request.url)
            r.abort()

    def on_navigated(frame):
        # events arrive in the browser's order: a document's requests all come before the
        # commit of the next document, whose requests all come after it
        if frame == page.main_frame:
            visit.document += 1

    def on_failed(req):
        if is_local(req.url):
            doc = made_in.get(req, -1)
            visit.failures.append(FailedRequest(req.url, str(req.failure), doc,
                                                req.is_navigation_request(),
                                                doc in visit.left_documents))

    def on_response(resp):
        if resp.status >= 400 and is_local(resp.url):
            visit.failures.append(FailedRequest(resp.url, f"HTTP {resp.status}"))

    def on_console(msg):
        if msg.type == "error":
            text = msg.text
            # the blocked remote request is already reported, with its URL
            if "net::ERR_FAILED" in text and visit.remote_requests:
                return
            visit.console_errors.append(text)

    page.route("**/*", route)
    page.on("framenavigated", on_navigated)
    page.on("request", lambda req: made_in.setdefault(req, visit.document))
    page.on("requestfailed", on_failed)
    page.on("response", on_response)
    page.on("console", on_console)
    page.on("pageerror", lambda exc: visit.page_errors.append(str(exc)))
    page.goto(url, wait_until="load")
    return visit


def check_math(page, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[str]:
    """Where the page has math, MathJax rendered all of it and no raw TeX is left in prose."""
    n_math = page.evaluate("() => document.querySelectorAll('.math').length")
    problems = []
    if n_math:
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && "
                                   "MathJax.startup.promise", timeout=timeout_ms)
            page.evaluate("() => MathJax.startup.promise")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.math')]"
                ".every(e => e.querySelector('mjx-container'))", timeout=timeout_ms)
        except Exception as exc:  # report, don't crash the whole module
            n_done = page.evaluate("() => [...document.querySelectorAll('.math')]"
                                   ".filter(e => e.querySelector('mjx-container')).length")
            problems.append(f"MathJax rendered {n_done} of {n_math} math elements "
                            f"({type(exc).__name__})")
        n_err = page.evaluate("() => document.querySelectorAll('mjx-merror').length")
        if n_err:
            problems.append(f"{n_err} TeX error(s) rendered by MathJax (mjx-merror)")
    text = page.evaluate(_VISIBLE_TEXT_JS)
    for token in RAW_TEX:
        if token in text:
            i = text.index(token)
            snippet = text[max(0, i - 40):i + 40]
            problems.append(f"raw TeX {token!r} left in the page: ...{snippet!r}")
    return problems


def check_images(page, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[str]:
    """Every <img> loaded (naturalWidth > 0): no broken-image icons."""
    page.evaluate("() => document.querySelectorAll('img').forEach(i => i.loading = 'eager')")
    try:
        page.wait_for_function("() => [...document.images].every(i => i.complete)",
                               timeout=timeout_ms)
    except Exception:  # the per-image report below says which
        pass
    broken = page.evaluate(
        "() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
        ".map(i => (i.getAttribute('src') || '<no src>').slice(0, 120))")
    return [f"image did not load: {src}" for src in broken]


def check_widgets(page) -> list[str]:
    """No live-widget leftovers: widget views need JS the book does not ship (dead controls)."""
    problems = []
    n_views = page.evaluate(
        "() => document.querySelectorAll('script[type*=\"jupyter.widget-view\"]').length")
    if n_views:
        problems.append(f"{n_views} ipywidgets view(s) in the HTML: they render nothing in the "
                        "book; use explorer.show() (a jshtml player when COURSE_LIB_BOOK=1)")
    text = page.evaluate(_VISIBLE_TEXT_JS)
    for pattern in RAW_WIDGET:
        m = pattern.search(text)
        if m:
            problems.append(f"raw widget text in the page: {m.group(0)!r}")
    return problems


def check_players(page) -> list[str]:
    """Every slider of a jshtml player has a name and changes the frame image when moved, and
    the frame's text alternative follows it."""
    return [f"slider {r['id'] or '(no id)'}: {r['why']}"
            for r in page.evaluate(_PLAYERS_JS) if not r["ok"]]


_MATH_FIT_JS = """
() => {
  const main = document.querySelector('main') || document.body;
  const right = main.getBoundingClientRect().right;
  const out = [];
  document.querySelectorAll('mjx-container[display="true"]').forEach((m, i) => {
    const box = m.getBoundingClientRect();
    const style = getComputedStyle(m);
    const scrolls = ['auto', 'scroll'].includes(style.overflowX);
    const block = m.closest('.math');
    const label = (block && block.id) || ('display equation ' + (i + 1));
    out.push({label, spills: box.right > right + 1 && box.width > 0,
              wider: m.scrollWidth > m.clientWidth + 1, scrolls,
              width: Math.round(m.scrollWidth), room: Math.round(m.clientWidth)});
  });
  return out;
}
"""


def math_widths(page) -> list[dict]:
    """Per display equation: its label, whether its box spills out of the main column, whether its
    content is wider than its box, and whether the box scrolls. Needs rendered math."""
    return page.evaluate(_MATH_FIT_JS)


def check_math_fits(page, strict: bool) -> list[str]:
    """No display equation is cut off: its box stays inside the main column, and content wider
    than the box can be scrolled to. ``strict``: no equation may need scrolling at all."""
    problems = []
    for m in math_widths(page):
        if m["spills"]:
            problems.append(f"{m['label']}: box spills out of the main column")
        if m["wider"] and not m["scrolls"]:
            problems.append(f"{m['label']}: {m['width']} px of math in {m['room']} px, cut off "
                            "with no scrollbar")
        elif m["wider"] and strict:
            problems.append(f"{m['label']}: {m['width']} px of math in {m['room']} px "
                            "(needs scrolling; break it into lines)")
    return problems


_FIGURES_JS = """
() => {
  const main = document.querySelector('main') || document.body;
  const out = [];
  main.querySelectorAll('.cell_output img, figure img, .output img').forEach(img => {
    if (img.closest('.animation')) return;            // explorer players: captioned by prose
    const fig = img.closest('figure');
    const cap = fig && fig.querySelector('figcaption');
    if (!cap || !cap.textContent.trim())
      out.push((img.getAttribute('src') || '<no src>').slice(0, 80));
  });
  return out;
}
"""


def check_figure_captions(page) -> list[str]:
    """Every figure image (outside explorer players) sits in a <figure> with a caption."""
    return [f"figure without a caption: {src}" for src in page.evaluate(_FIGURES_JS)]


_SECTIONS_JS = """
() => {
  const main = document.querySelector('main') || document.body;
  const heads = [...main.querySelectorAll('article h1, article h2')];
  return heads.map(h => ({tag: h.tagName, text: h.textContent.trim().slice(0, 60),
                          numbered: !!h.querySelector('.section-number')}));
}
"""


def check_numbered_sections(page) -> list[str]:
    """The chapter title and every section heading carry a number from the table of contents."""
    heads = page.evaluate(_SECTIONS_JS)
    if not heads:
        return ["no headings found"]
    return [f"{h['tag']} not numbered: {h['text']!r}" for h in heads if not h["numbered"]]


# axe-core, pinned in package.json / package-lock.json (installed by `npm ci`, which `make book`
# runs): injected into the page from node_modules, never from a CDN.
AXE_JS = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
# The WCAG 2.0 / 2.1 level A and AA rules (axe's tags), the legal bar the README states.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FAILING_IMPACTS = ("serious", "critical")

_AXE_RUN_JS = """
async ([tags, colourOutside]) => {
  const report = r => r.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 3)}));
  if (!colourOutside) {
    return report(await axe.run(document, {runOnly: {type: 'tag', values: tags},
                                           resultTypes: ['violations']}));
  }
  const off = Object.fromEntries(COLOUR_RULES.map(id => [id, {enabled: false}]));
  const rest = await axe.run(document, {runOnly: {type: 'tag', values: tags}, rules: off,
                                        resultTypes: ['violations']});
  const colour = await axe.run({include: [document], exclude: [[colourOutside]]},
                               {runOnly: {type: 'rule', values: COLOUR_RULES},
                                resultTypes: ['violations']});
  return report(rest).concat(report(colour));
}
"""
#: axe's rules that read colours (text contrast; a link told from its text by colour alone).
AXE_COLOUR_RULES = ("color-contrast", "link-in-text-block")
_AXE_RUN_JS = _AXE_RUN_JS.replace("COLOUR_RULES", repr(list(AXE_COLOUR_RULES)))


def axe_violations(page, colour_outside: str | None = None) -> list[dict]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now (all impacts): per rule its
    id, impact, help text, node count and the first three nodes' selectors. ``colour_outside``:
    a selector whose elements the colour rules (:data:`AXE_COLOUR_RULES`) leave out, where
    another check shows their colours are those checked elsewhere."""
    if not AXE_JS.is_file():
        raise FileNotFoundError(f"{AXE_JS} not found: run `npm ci` (`make book` does) to install "
                                "axe-core, pinned in package-lock.json")
    # icon fonts first: axe tells an icon glyph from visible text by drawing it, and a glyph of a
    # font still loading reads as text (label-content-name-mismatch on icon-only buttons)
    page.evaluate("() => document.fonts.ready.then(() => true)")
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
    return page.evaluate(_AXE_RUN_JS, [AXE_TAGS, colour_outside])


def check_axe(page, colour_outside: str | None = None) -> list[str]:
    """No serious or critical violation of a WCAG 2.1 A/AA rule (axe-core) on the page
    (``colour_outside``: see :func:`axe_violations`)."""
    return [f"axe {v['id']} ({v['impact']}, {v['count']} element(s)): {v['help']}: "
            + "; ".join(v["nodes"])
            for v in axe_violations(page, colour_outside)
            if v["impact"] in AXE_FAILING_IMPACTS]


_IMAGE_ALTS_JS = """
() => {
  const main = document.querySelector('main') || document.body;
  return [...main.querySelectorAll('img')].map(img => ({
    src: (img.getAttribute('src') || '<no src>').slice(0, 80),
    alt: img.getAttribute('alt'),
    decorative: img.getAttribute('role') === 'presentation' || img.getAttribute('alt') === '' &&
                !!img.closest('a, button') && !!(img.closest('a, button').textContent.trim())}));
}
"""
# A file name or path as "alternative text": what myst-nb writes when a cell gives no alt.
_FILE_LIKE = re.compile(r"(\.(png|jpe?g|svg|gif)\b)|(_images/)|(^[\w./-]+$)", re.I)


def check_image_alts(page) -> list[str]:
    """Every image of the page's content has a real text alternative: present, not empty (unless
    decorative beside a text that names its link), not a file name (tests/test_figure_alt.py
    checks the notebooks' alt texts themselves)."""
    problems = []
    for img in page.evaluate(_IMAGE_ALTS_JS):
        alt = (img["alt"] or "").strip()
        if img["decorative"]:
            continue
        if not alt:
            problems.append(f"image without alt text: {img['src']}")
        elif _FILE_LIKE.search(alt):
            problems.append(f"image whose alt text is a file name ({alt[:60]!r}): {img['src']}")
    return problems


_SCROLL_CUES_JS = """
() => {
  if (window.courseMarkScrollers) window.courseMarkScrollers();
  const main = document.querySelector('main') || document.body;
  const sel = 'pre, mjx-container[display="true"], .course-player-frame, ' +
              '.pst-scrollable-table-container, .table-wrapper';
  const out = [];
  main.querySelectorAll(sel).forEach(el => {
    const st = getComputedStyle(el);
    if (el.scrollWidth <= el.clientWidth + 1 || !['auto', 'scroll'].includes(st.overflowX) ||
        el.getClientRects().length === 0) return;
    const what = el.tagName.toLowerCase() + '.' + String(el.className).split(' ')[0];
    if (el.tabIndex < 0) out.push(what + ': scrolls sideways but cannot be reached by keyboard');
    else if (!el.getAttribute('aria-label')) out.push(what + ': scrolling region without a name');
    if (el.scrollLeft < el.scrollWidth - el.clientWidth - 1 && st.boxShadow === 'none')
      out.push(what + ': scrolls sideways with no visible cue at its edge');
  });
  return out.slice(0, 5);
}
"""


def check_scroll_cues(page) -> list[str]:
    """Each box that scrolls sideways can be focused by keyboard (tabindex, a name) and shades
    the edge beyond which content hides (book/_static/course.js and course.css)."""
    return page.evaluate(_SCROLL_CUES_JS)


def dialog_backdrop(page, dialog: str) -> str:
    """The computed background of an open <dialog>'s ::backdrop ("rgba(0, 0, 0, 0)": none)."""
    return page.evaluate("(sel) => getComputedStyle(document.querySelector(sel), '::backdrop')"
                         ".backgroundColor", dialog)
