"""The learner's workbook in the HTML book, and a throw-away progress record for the build.

A local Sphinx extension (``_config.yml`` -> ``sphinx.local_extensions: {book_workbook: tools/}``):

* ``config-inited``: points ``COURSE_LIB_PROGRESS`` at ``_build/.book-progress.sqlite3`` before
  any notebook runs, so executing the book never writes to the reader's own progress record
  (the solution cells also pass ``record=False``);
* ``html-page-context``: adds "workbook" to the download menu of every chapter page: the
  learner's copy of that chapter (no solutions, answers folded;
  see ``course_lib.toolkit.workbook``);
* ``build-finished``: writes those copies to ``_build/html/workbook/NN_name.ipynb``. A chapter
  whose solution cell is not tagged ``solution`` is reported as a warning (an error under ``-W``)
  instead of being published with its solution.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

WORKBOOK_DIR = "workbook"
_CHAPTER = re.compile(r"^book/\d\d_[\w-]+$")


def _chapters(app) -> list[str]:
    return sorted(d for d in app.env.found_docs
                  if _CHAPTER.match(d) and (Path(app.srcdir) / f"{d}.ipynb").is_file())


def _config_inited(app, config) -> None:
    record = Path(app.outdir).parent / ".book-progress.sqlite3"
    os.environ["COURSE_LIB_PROGRESS"] = str(record)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if not _CHAPTER.match(pagename) or not (Path(app.srcdir) / f"{pagename}.ipynb").is_file():
        return
    name = pagename.rsplit("/", 1)[-1]
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(1, {
                "type": "link",
                "url": context["pathto"](f"{WORKBOOK_DIR}/{name}.ipynb", 1),
                "text": "workbook",
                "tooltip": "Download your copy of this chapter to work in (no solutions)",
                "icon": "fas fa-pencil-alt",
                "label": "download-workbook-button",
            })


def _build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import json

    from sphinx.util import logging

    from course_lib.toolkit.book_refs import build_index
    from course_lib.toolkit.workbook import WorkbookError, dumps, learner_copy

    log = logging.getLogger(__name__)
    out = Path(app.outdir) / WORKBOOK_DIR
    out.mkdir(parents=True, exist_ok=True)
    index = build_index(Path(app.srcdir) / "book")
    for doc in _chapters(app):
        src = Path(app.srcdir) / f"{doc}.ipynb"
        try:
            nb = learner_copy(json.loads(src.read_text(encoding="utf-8")), src.name,
                              index)
        except WorkbookError as e:
            log.warning("workbook not written: %s", e, type="book_workbook", subtype="solution")
            continue
        (out / src.name).write_text(dumps(nb), encoding="utf-8")


def setup(app):
    app.connect("config-inited", _config_inited)
    app.connect("html-page-context", _page_context, priority=600)   # after the theme's (501)
    app.connect("build-finished", _build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
