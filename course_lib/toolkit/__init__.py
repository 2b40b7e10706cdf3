"""Infrastructure shared by the chapters: ``display`` (markdown tables), ``plotting`` (the course
style, heatmaps), ``explorer`` (the interactive explorer base), ``checking`` (the exercise
checker), ``bench`` (the benchmark harness) and ``training`` (a small training loop). Imports
the attention core, never a chapter."""
