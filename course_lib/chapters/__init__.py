"""One package per chapter, named like its notebook (``ch03_softmax`` for ``book/03_softmax``):
``helpers`` (the chapter's computations), ``plots``, ``explorer`` and ``exercises``. Chapters
import :mod:`course_lib.attention` and :mod:`course_lib.toolkit`, never each other."""
