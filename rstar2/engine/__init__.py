"""Inference engines behind one protocol: the embedded CPU engine (continuous batching)."""

from rstar2.engine.async_engine import AsyncEngine, EngineClosedError, open_engine
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore, load_causal_lm
from rstar2.engine.protocol import Engine, GenerationOutput, SamplingParams

__all__ = [
    "AsyncEngine",
    "Engine",
    "EngineClosedError",
    "EngineConfig",
    "EngineCore",
    "GenerationOutput",
    "SamplingParams",
    "load_causal_lm",
    "open_engine",
]
