"""zkqueue: Curator queue recipes for Python."""
