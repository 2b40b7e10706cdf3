"""Chapter 4: see book/04_multi_head.ipynb."""
