"""Sampling layer: which indices (or elements) each process gets, by whole or split batches, with the
vectorised index path for the standard samplers."""
