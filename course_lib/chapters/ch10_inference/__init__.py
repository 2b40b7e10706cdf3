"""Chapter 10: see book/10_inference.ipynb."""
