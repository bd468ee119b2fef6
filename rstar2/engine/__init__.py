"""Inference engines behind one protocol: the embedded CPU engine (continuous batching)."""
