"""Chapter 5: see book/05_positions.ipynb."""
