"""Chapter 6: see book/06_masks.ipynb."""
