"""Browser test of the built HTML book (see test_book_in_browser.py)."""
