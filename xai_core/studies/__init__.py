"""Experiments on the model: interventions (heads off, tokens dropped, ...), cause vs claim,
the read-out per block, pictures the model does not know, and every method run on one
image, measured (`method_runs`)."""
