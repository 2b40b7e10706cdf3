"""Chapter 14: see book/14_open_models.ipynb."""
