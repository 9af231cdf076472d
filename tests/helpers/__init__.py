"""Test helpers shared by every layer: process groups, datasets, loader cases, the Lightning app."""
