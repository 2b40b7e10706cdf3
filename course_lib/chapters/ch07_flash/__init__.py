"""Chapter 07: see book/07_flash.ipynb."""
