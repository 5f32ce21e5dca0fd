"""Readers: one module per format, found through `scrub.readers.base.REGISTRY`."""
