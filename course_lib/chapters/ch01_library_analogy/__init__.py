"""Chapter 1: see book/01_library_analogy.ipynb."""
