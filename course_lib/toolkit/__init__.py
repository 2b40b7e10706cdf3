"""Infrastructure shared by the chapters: ``display`` (markdown tables), ``plotting`` (the course
style, heatmaps), ``explorer`` (the interactive explorer base), ``checking`` (the exercise
checker), ``bench`` (the benchmark harness), ``training`` (a small training loop) and
``kernel_polling`` (how every notebook runner waits for a kernel's replies). Imports the
attention core, never a chapter."""
