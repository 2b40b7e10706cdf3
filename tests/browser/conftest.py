"""Fixtures for the browser test: the built site, a local HTTP server, a headless Chromium.

Chromium is Debian's (``apt-get install chromium chromium-driver``), driven by Playwright through
``executable_path`` (Playwright's own browser download needs internet). Without it the tests skip
with a clear message; under CI (``CI=true``) they fail instead, so CI can never pass silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def skip_or_fail(message: str) -> None:
    """Skip locally, fail in CI: a missing browser or book must never pass CI silently."""
    if in_ci():
        pytest.fail(f"{message} (CI=true: failing instead of skipping)", pytrace=False)
    pytest.skip(message)


def chromium_path() -> str | None:
    """$CHROMIUM if set (only that), else Debian's /usr/bin/chromium or one on PATH."""
    if os.environ.get("CHROMIUM"):
        candidates = [os.environ["CHROMIUM"]]
    else:
        candidates = ["/usr/bin/chromium", shutil.which("chromium") or "",
                      shutil.which("chromium-browser") or ""]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # stdlib signature
        pass


class LocalServer:
    """Serve a directory on 127.0.0.1 (a free port the OS picks) from a daemon thread.
    ``handler_class``: a ``SimpleHTTPRequestHandler`` subclass (the self-test's holds requests)."""

    def __init__(self, directory: Path, handler_class: type = _QuietHandler) -> None:
        handler = functools.partial(handler_class, directory=str(directory))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        skip_or_fail(f"no built book at {SITE}: run `make book` first")
    return SITE


@pytest.fixture(scope="session")
def server(site: Path) -> Iterator[LocalServer]:
    with LocalServer(site) as srv:
        yield srv


@pytest.fixture(scope="session")
def browser():
    exe = chromium_path()
    if exe is None:
        skip_or_fail("Chromium not found: install Debian's `chromium` and `chromium-driver` "
                     "(`apt-get install -y chromium chromium-driver`; .ci/run does) to run the "
                     "browser test")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("the Python package `playwright` is not installed (it is in "
                     "requirements.txt: run `make install`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="session")
def screenshots_dir() -> Path | None:
    """Where a full-page screenshot of each chapter goes, when ``COURSE_LIB_SCREENSHOTS=1``
    (``make browser SCREENSHOTS=1``); else ``None``: the screenshots are pictures for a reviewer,
    checked by nothing, and took a seventh of the browser stage (21 s of 77 s for the desktop
    pages on two cores)."""
    if os.environ.get("COURSE_LIB_SCREENSHOTS", "") in ("", "0"):
        return None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
