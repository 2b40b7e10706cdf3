"""Chapter 04: see book/04_multi_head.ipynb."""
