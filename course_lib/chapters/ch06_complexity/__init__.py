"""Chapter 06: see book/06_complexity.ipynb."""
