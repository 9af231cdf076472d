"""Loader layer: the per-process loaders, their position in the epoch and their saved state."""
