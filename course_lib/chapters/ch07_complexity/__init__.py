"""Chapter 7: see book/07_complexity.ipynb."""
