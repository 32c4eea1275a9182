"""Infrastructure every layer shares: content-keyed caches and the on-disk result store,
locks, seeded randomness, faults and cancellation, the cost budget and the error types."""
