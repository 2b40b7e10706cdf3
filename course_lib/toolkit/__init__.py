"""Infrastructure shared by the chapters: ``display`` (markdown tables), ``plotting`` (the course
style, heatmaps), ``explorer`` (the interactive explorer base), ``checking`` (the exercise
checker) and ``bench`` (the benchmark harness). Imports the attention core, never a chapter."""
