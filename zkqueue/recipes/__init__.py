"""Recipes: Curator's queue kinds on the engine. Each overrides only the engine's naming, sort and delay hooks
(priority, delay, id), or stands beside it (simple queue, sharder, blocking consumer)."""
