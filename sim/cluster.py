"""The simulated cluster's shape (`Cluster`): how many rollout engines, and each one's KV cache,
sequence limit and step cost.

What it does not do: derive the shape from a model and GPUs (`sim.config.resolve_cluster`),
or model an engine (`sim.engine.EngineModel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost import CostModel


@dataclass(frozen=True)
class Cluster:
    """The engines a simulation plays on (`Simulation`, `TrainingRun`)."""

    num_engines: int
    """Rollout engines (data-parallel replicas); the policy must be built for as many."""
    kv_tokens: int
    """Tokens of KV cache per engine (the simulator rounds it down to whole blocks)."""
    cost: CostModel
    """The time of one engine step."""
    max_num_seqs: int = 256
    """Sequences an engine runs at once."""
