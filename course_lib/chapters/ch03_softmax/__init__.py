"""Chapter 03: see book/03_softmax.ipynb."""
