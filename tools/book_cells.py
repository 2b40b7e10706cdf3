"""The book's code cells as readers see them: no test scaffolding.

A local Sphinx extension (``_config.yml`` -> ``sphinx.local_extensions: {book_cells: tools/}``).
On ``doctree-read`` it rewrites the first line of each code cell's source shown on the page with
``course_lib.toolkit.workbook.for_readers``, the wording the learner's workbook uses too: the
comment that tells nbval why a cell's output is not compared ("# output not compared by nbval:
widget model ids are new on every run") goes, and a machine-dependent cell keeps what a reader
needs ("# machine-dependent: live timings of this CPU"). The notebooks keep the comments: nbval
and the tests read them there.
"""

from __future__ import annotations

from docutils import nodes


def readers_doctree(doctree: nodes.Node) -> int:
    """Rewrite, in place, every code cell's source (a ``literal_block`` in a myst-nb
    ``cell_input`` container); return how many changed."""
    from course_lib.toolkit.workbook import for_readers

    changed = 0
    for block in list(doctree.findall(nodes.literal_block)):
        parent = block.parent
        if parent is None or "cell_input" not in parent.get("classes", []):
            continue
        text = block.astext()
        new = for_readers(text)
        if new == text:
            continue
        block.children = []
        block += nodes.Text(new)
        block.rawsource = new
        changed += 1
    return changed


def _doctree_read(app, doctree) -> None:
    readers_doctree(doctree)


def setup(app):
    app.connect("doctree-read", _doctree_read)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
