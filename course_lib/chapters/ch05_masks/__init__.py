"""Chapter 05: see book/05_masks.ipynb."""
