"""Chapter 01: see book/01_library_analogy.ipynb."""
