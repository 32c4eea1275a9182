"""Analyses the pages build on that are not attribution methods: tokens, sinks, high-norm
tokens, the toy attention tables and the text encoder."""
