"""Serve every front-end asset of the HTML book from the build itself (no CDN).

Used two ways:

* as a Sphinx extension (``_config.yml`` -> ``sphinx.local_extensions: {book_assets: tools/}``):

  - ``config-inited``: takes math out of the keyboard's Tab order (:func:`keyboard_mathjax`);
    copies MathJax 3 (``node_modules/mathjax/es5``, installed by ``npm ci``
    from ``package-lock.json``) into ``_build/book_assets/mathjax``; ``html_extra_path`` puts it at
    ``_build/html/mathjax/`` and ``mathjax_path`` points there;
  - ``html-page-context``: removes the Font Awesome 4 ``<link>`` that matplotlib's
    ``FuncAnimation.to_jshtml`` embeds (a CDN load); the theme's own local Font Awesome draws the
    player's button icons; the bibliography's entries become ``role="listitem"`` of their
    ``role="list"`` (sphinxcontrib-bibtex's deprecated ``doc-biblioentry`` fails axe);
  - ``build-finished``: scans every written HTML page and emits a warning (an error under
    ``-W``) for any ``<script src>``/``<link href>``/``<img src>`` that loads from a remote host,
    or for a missing local MathJax.

* as a script, ``python tools/book_assets.py`` (``make book`` runs it): the same copy, so the
  staging folder exists before Sphinx starts.
"""

from __future__ import annotations

import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATHJAX_SRC = ROOT / "node_modules" / "mathjax"
STAGING = ROOT / "_build" / "book_assets"
MATHJAX_DST = STAGING / "mathjax"
MATHJAX_ENTRY = "tex-chtml.js"

# matplotlib/_animation_data.py: JS_INCLUDE starts with a Font Awesome 4.4 link on maxcdn.
_FA_LINK = re.compile(
    r"<link\s+rel=\"stylesheet\"\s+href=\"https?://[^\"]*font-awesome[^\"]*\"\s*/?>", re.I
)


_BIBLIOENTRY = 'role="doc-biblioentry"'


def vendor_mathjax(src: Path = MATHJAX_SRC, dst: Path = MATHJAX_DST) -> Path:
    """Copy ``mathjax/es5`` (+ its LICENSE) to ``dst`` unless already identical; return entry."""
    es5 = src / "es5"
    if not (es5 / MATHJAX_ENTRY).is_file():
        raise FileNotFoundError(
            f"{es5 / MATHJAX_ENTRY} not found: run `npm ci` in the repository root "
            "(`make book` does it) to fetch mathjax@3 pinned by package-lock.json"
        )
    stamp = dst / ".version"
    version = (src / "package.json").read_text(encoding="utf-8")
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == version:
        return dst / MATHJAX_ENTRY
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(es5, dst)
    shutil.copy2(src / "LICENSE", dst / "LICENSE")
    stamp.write_text(version, encoding="utf-8")
    return dst / MATHJAX_ENTRY


class _RemoteLoads(HTMLParser):
    """Collect resources a browser would fetch on page load from a non-local URL."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.remote: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        url = ""
        if tag in ("script", "img", "iframe", "audio", "video", "source", "embed"):
            url = a.get("src", "")
        elif tag == "link":
            rel = a.get("rel", "").lower()
            if any(r in rel for r in ("stylesheet", "preload", "preconnect", "icon", "prefetch",
                                      "modulepreload", "dns-prefetch")):
                url = a.get("href", "")
        if re.match(r"^(https?:)?//", url):
            self.remote.append(f"<{tag}> {url}")


def remote_loads(html: str) -> list[str]:
    """Remote URLs an HTML page would load (scripts, styles, images, iframes, @import)."""
    parser = _RemoteLoads()
    parser.feed(html)
    found = parser.remote
    found += [f"@import {m}" for m in re.findall(r"@import\s+url\(['\"]?(https?://[^)'\"]+)", html)]
    return found


# --------------------------------------------------------------------------- Sphinx extension


def keyboard_mathjax(mathjax3_config: dict | None) -> dict:
    """``mathjax3_config`` with math out of the Tab order: MathJax 3 makes every formula a Tab
    stop (its menu's ``inTabOrder`` defaults to true), so a keyboard user pressed Tab 138 times to
    reach chapter 13's first slider. The formulas stay readable by screen readers (their
    assistive MathML) and reachable through the MathJax menu (right click)."""
    out = dict(mathjax3_config or {})
    options = dict(out.get("options", {}))
    menu = dict(options.get("menuOptions", {}))
    menu["settings"] = {**menu.get("settings", {}), "inTabOrder": False}
    options["menuOptions"] = menu
    out["options"] = options
    return out


def _config_inited(app, config) -> None:
    from sphinx.util import logging

    config.mathjax3_config = keyboard_mathjax(config.mathjax3_config)
    try:
        vendor_mathjax()
    except FileNotFoundError as exc:
        STAGING.mkdir(parents=True, exist_ok=True)  # keep html_extra_path valid
        logging.getLogger(__name__).warning(str(exc), type="book_assets", subtype="mathjax")


def _is_thebe(asset) -> bool:
    name = str(getattr(asset, "filename", asset) or "")
    body = str(getattr(asset, "attributes", {}).get("body", ""))
    return "sphinx-thebe" in name or "THEBE_JS_URL" in body


def _page_context(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if body and "font-awesome" in body:
        context["body"] = _FA_LINK.sub("", body)
    body = context.get("body")
    if body and _BIBLIOENTRY in body:
        # sphinxcontrib-bibtex 2.7 puts role="doc-biblioentry" (deprecated in ARIA 1.2) on the
        # entries of a role="list": axe's aria-required-children (critical) wants listitems.
        context["body"] = body.replace(_BIBLIOENTRY, 'role="listitem"')
    # Live code (thebe) is off (launch_buttons.thebe: false), but sphinx-thebe, a default JB
    # extension, still injects its loader (twice, which throws a redeclaration error) and the
    # URL of thebe on unpkg. Drop it; Binder/Colab/JupyterHub launch buttons are plain links.
    if not app.config.html_theme_options.get("launch_buttons", {}).get("thebe"):
        for key in ("script_files", "css_files"):
            if key in context:
                context[key] = [a for a in context[key] if not _is_thebe(a)]


def _build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    out = Path(app.outdir)
    if not (out / "mathjax" / MATHJAX_ENTRY).is_file():
        log.warning("local MathJax missing from the build (expected mathjax/%s)", MATHJAX_ENTRY,
                    type="book_assets", subtype="mathjax")
    for page in sorted(out.rglob("*.html")):
        if "mathjax" in page.relative_to(out).parts:
            continue
        for item in remote_loads(page.read_text(encoding="utf-8", errors="replace")):
            log.warning("%s loads a remote resource on page load: %s",
                        page.relative_to(out), item, type="book_assets", subtype="remote")


def setup(app):
    # MathJax (and every other asset) on every page: math can also arrive in pages Sphinx does not
    # flag as having equations (citations, index, search snippets).
    app.set_html_assets_policy("always")
    # book/_static/course.js: every sidebar toggle works (pydata-sphinx-theme issue #2451).
    app.add_js_file("course.js")
    app.connect("config-inited", _config_inited, priority=100)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("build-finished", _build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    try:
        print(f"MathJax served from {vendor_mathjax().parent.relative_to(ROOT)}")
    except FileNotFoundError as exc:
        sys.exit(str(exc))
