"""Chapter 13: see book/13_across_devices.ipynb."""
