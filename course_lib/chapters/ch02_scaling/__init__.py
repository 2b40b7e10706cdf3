"""Chapter 2: see book/02_scaling.ipynb."""
