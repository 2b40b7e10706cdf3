"""Chapter 02: see book/02_scaling.ipynb."""
