"""Communication layer: data-parallel topology, collectives, RNG synchronisation, the dispatch wire,
and the one walker over nested batches they share."""
