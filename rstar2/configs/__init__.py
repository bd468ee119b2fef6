"""Packaged config files (the embedded default)."""
