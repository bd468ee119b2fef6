"""Shared pytest configuration: every test runs on a CPU-only machine."""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
