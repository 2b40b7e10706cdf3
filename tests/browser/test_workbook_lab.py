"""The learner's workbook in a real JupyterLab (headless Chromium), as ``make lab`` runs it.

A fresh workbook (``course_lib.toolkit.workbook``) in a temporary folder, JupyterLab on a free
port with a token and the repository's lab configuration (``tools/lab/jupyter_lab_config.py``),
every Jupyter/IPython folder in the temporary folder (never the home directory). One chapter is
opened and run top to bottom; then the test reads what the learner sees:

* no rendered markdown shows the book's machinery: ``(eq-``, ``(sec-``, a MyST fence
  ``{admonition}``, a bare citation key ``[dao2022...]``; equations and references carry the
  book's numbers ("(1.2)");
* the explorer is live ipywidgets, and moving its slider redraws its figure;
* a wrong solution typed into the exercise gets a ✗ box, a right one a ✓ box.

Skips without Chromium or Playwright (fails under ``CI=true``, see conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAB_CONFIG = ROOT / "tools" / "lab" / "jupyter_lab_config.py"
CHAPTER = "01_library_analogy.ipynb"
# The machinery the book's source would show if a construct were neither rendered nor converted.
LEAKS = re.compile(r"\((eq|sec|fig)-[\w-]+\)|```\{|:::\{|\{(cite|eq|numref|ref|doc|term)[:\w]*\}`|"
                   r"\[[a-z]+\d{4}[a-z]\w*\]|:class:")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """JupyterLab on ``root`` (headless), with every Jupyter folder under ``home``."""

    def __init__(self, root: Path, home: Path, *, disabled: tuple[str, ...] = ()) -> None:
        self.root, self.home = root, home
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.disabled = disabled
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                          ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                          ("MPLCONFIGDIR", "mpl"), ("HOME", "home")]:
            (self.home / sub).mkdir(parents=True, exist_ok=True)
            env[name] = str(self.home / sub)
        env.pop("JUPYTER_PATH", None)
        env.pop("MPLBACKEND", None)
        env.pop("COURSE_LIB_BOOK", None)
        env["COURSE_LIB_PROGRESS"] = str(self.home / "progress.sqlite3")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    def _settings(self) -> Path:
        """User settings of this run only: every cell rendered (no windowing), so the test sees
        the whole notebook; plus the disabled extensions (the "before" screenshot)."""
        settings = self.home / "settings"
        tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True, exist_ok=True)
        tracker.write_text(json.dumps({"windowingMode": "none"}))
        if self.disabled:
            labconfig = self.home / "config" / "labconfig"
            labconfig.mkdir(parents=True, exist_ok=True)
            (labconfig / "page_config.json").write_text(json.dumps(
                {"disabledExtensions": {name: True for name in self.disabled}}))
        return settings

    def __enter__(self) -> Lab:
        env = self.env()
        settings = self._settings()
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--config={LAB_CONFIG}",
               f"--ServerApp.port={self.port}", "--ServerApp.ip=127.0.0.1",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", f"--LabApp.user_settings_dir={settings}",
               f"--LabApp.workspaces_dir={self.home / 'workspaces'}"]
        if hasattr(os, "getuid") and os.getuid() == 0:
            cmd.append("--allow-root")
        self.log = (self.home / "lab.log").open("w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError("JupyterLab exited:\n"
                                       + (self.home / "lab.log").read_text())
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{self.base}/api/status?token={self.token}",
                                           timeout=2)
                    return self
                time.sleep(0.3)
            raise RuntimeError("JupyterLab did not start in 60 s:\n"
                               + (self.home / "lab.log").read_text())
        except BaseException:
            # `with` calls __exit__ only after __enter__ returned: a server that never answered
            # (or a Ctrl-C while waiting) is ended here, with everything it started
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            # the whole session: also what the server started, should the server be gone
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/{notebook}?token={self.token}&reset"


@contextlib.contextmanager
def open_notebook(browser, lab: Lab, notebook: str, *, width: int = 1400,
                  height: int = 1000) -> Iterator:
    page = browser.new_page(viewport={"width": width, "height": height})
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.console_messages = messages
    try:
        page.goto(lab.url(notebook))
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                               timeout=60_000)
        yield page
    finally:
        page.close()


WRONG = """def retrieve(query, keys, values):
    return values.mean(dim=0)
"""
RIGHT = """def retrieve(query, keys, values):
    weights = torch.softmax(keys @ query, dim=-1)
    return weights @ values
"""
# What the learner reads: innerText skips the hidden source editor of a rendered cell.
JS_MARKDOWN = "() => Array.from(document.querySelectorAll('.jp-MarkdownCell'), c => c.innerText)"


def _cell(page, contains: str):
    """The code cell whose source contains ``contains``."""
    cell = page.locator(".jp-CodeCell").filter(
        has=page.locator(".jp-InputArea-editor", has_text=contains)).first
    cell.scroll_into_view_if_needed()
    return cell


def _run_all(page, timeout_s: float = 120) -> None:
    page.click("li.lm-MenuBar-item:has-text('Run')")
    page.click("li.lm-Menu-item:has-text('Run All Cells')")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = page.eval_on_selector_all(
            ".jp-CodeCell .jp-InputPrompt", "ps => ps.map(p => p.innerText.trim())")
        if prompts and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts):
            return
        time.sleep(0.5)
    raise AssertionError(f"Run All did not finish in {timeout_s} s: {prompts}")


def _wait_until(condition, timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):   # an element replaced while it is read
            if condition():
                return
        time.sleep(0.3)
    raise AssertionError(message)


def _set_source(page, cell, code: str) -> None:
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(code)     # no key events: no auto-indent or bracket closing
    page.keyboard.press("Shift+Enter")  # run the starter; the check cell below is selected
    page.keyboard.press("Shift+Enter")  # run the check


def _check_output(page, before: str, timeout_s: float = 30) -> str:
    check = _cell(page, 'exercises.check("retrieve"')
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = check.locator(".jp-OutputArea").inner_text()
        if text.strip() and text != before:
            return text
        time.sleep(0.3)
    raise AssertionError(f"the check cell did not update: {before!r}")


@pytest.fixture(scope="module")
def workbook_lab(tmp_path_factory) -> Iterator[Lab]:
    from course_lib.toolkit.workbook import write_workbook

    tmp = tmp_path_factory.mktemp("workbook-lab")
    write_workbook(tmp / "workbook", source=ROOT / "book")
    with Lab(tmp / "workbook", tmp / "jupyter") as lab:
        yield lab


@pytest.mark.slow
def test_a_chapter_reads_like_the_book_and_runs_in_jupyterlab(browser, workbook_lab):
    with open_notebook(browser, workbook_lab, CHAPTER) as page:
        explorer = _cell(page, "library_explorer()")
        assert "Run this cell to show the live explorer" in explorer.inner_text()
        assert page.locator(".jp-Notebook .jp-Toast, .Toastify__toast").filter(
            has_text="Jupyter news").count() == 0

        _run_all(page)
        texts = page.evaluate(JS_MARKDOWN)
        leaks = [(i, m.group(0)) for i, t in enumerate(texts) for m in LEAKS.finditer(t)]
        assert texts and not leaks, leaks
        prose = "\n".join(texts)
        assert "Learning goals" in prose and ":class:" not in prose    # the admonition
        assert "Vaswani et al. (2017)" in prose                         # a citation
        assert "Section 1.7" in prose                                   # a {numref}
        numbers = set(re.findall(r"\(1\.(\d)\)", prose))
        assert {"1", "2", "3", "4", "5"} <= numbers, numbers            # the book's (1.n)

        explorer = _cell(page, "library_explorer()")
        slider = explorer.locator(".widget-slider, .jupyter-widget-slider").first
        slider.wait_for(timeout=30_000)
        image = explorer.locator(".jp-OutputArea-output img").first
        image.wait_for(timeout=30_000)
        first = image.get_attribute("src")
        track = explorer.locator(".noUi-target").first
        box = track.bounding_box()
        page.mouse.click(box["x"] + 0.9 * box["width"], box["y"] + box["height"] / 2)
        _wait_until(lambda: image.get_attribute("src") not in (None, first), 30,
                    "moving the slider did not redraw the explorer's figure")

        starter = _cell(page, "def retrieve(query, keys, values):")
        before = _cell(page, 'exercises.check("retrieve"').locator(".jp-OutputArea").inner_text()
        _set_source(page, starter, WRONG)
        wrong = _check_output(page, before)
        assert "✗" in wrong and "✓" not in wrong, wrong
        _set_source(page, starter, RIGHT)
        right = _check_output(page, wrong)
        assert "✓" in right and "Correct" in right, right
        errors = [m for m in page.console_messages if "Unsatisfied version" in m]
        assert not errors, errors[:3]
