"""Interactive explorers, one module per chapter; see :mod:`course_lib.widgets._explorer`."""

from ._explorer import BOOK_ENV, Control, Explorer, book_mode

__all__ = ["BOOK_ENV", "Control", "Explorer", "book_mode"]
