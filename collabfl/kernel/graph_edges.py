"""The one shape of a collaboration graph's edge, shared by the methods that draw graphs and
the coordinator that records them (imports nothing: the CLI reads records without torch)."""

Edge = tuple[int, int, float]
"""(i, j, w): client i uses client j's model with weight w."""
