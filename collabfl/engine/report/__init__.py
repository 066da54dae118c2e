"""Run outputs: the run directory, summaries, graph statistics, plots and tables."""
