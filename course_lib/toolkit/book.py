"""Whether the HTML book is being built: ``make book`` exports ``COURSE_LIB_BOOK=1``.

Kept apart from the explorer (which needs matplotlib) so that code without plots can ask without
importing matplotlib.
"""

from __future__ import annotations

import os

BOOK_ENV = "COURSE_LIB_BOOK"


def book_mode() -> bool:
    """True while the HTML book is being built (``COURSE_LIB_BOOK=1``)."""
    return os.environ.get(BOOK_ENV, "") == "1"
