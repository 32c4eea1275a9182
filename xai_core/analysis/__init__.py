"""Analyses the pages build on that are not attribution methods: tokens, sinks, high-norm
tokens, the toy attention tables, the text encoder, and the one entropy they share."""
