"""Chapter 3: see book/03_softmax.ipynb."""
