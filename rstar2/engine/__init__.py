"""Inference engines behind one protocol: the embedded CPU engine (continuous batching)."""

from typing import TYPE_CHECKING

from rstar2.lazy_names import lazy_names

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` below
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

__getattr__ = lazy_names(
    __name__,
    {
        "AsyncEngine": "rstar2.engine.async_engine",
        "Engine": "rstar2.engine.protocol",
        "EngineClosedError": "rstar2.engine.async_engine",
        "EngineConfig": "rstar2.engine.config",
        "EngineCore": "rstar2.engine.core",
        "GenerationOutput": "rstar2.engine.protocol",
        "SamplingParams": "rstar2.engine.protocol",
        "load_causal_lm": "rstar2.engine.core",
        "open_engine": "rstar2.engine.async_engine",
    },
)
