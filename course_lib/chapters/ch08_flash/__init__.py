"""Chapter 8: see book/08_flash.ipynb."""
