"""A rollout worker's engine as its agent loops see it: gated by policy version, timed as busy.

Each generation is one turn under the worker's weight gate (`rstar2.rollout.weight_gate`): it
waits while an update loads, and its output is tagged with the policy version that generated
it (`GenerationOutput.policy_version`). The engine's time on it counts as the worker's busy
time for the profiler (`BusyTrack`, port "generate").

What it does not do: load weights (the worker's "weights" port) or route a turn to another
engine (`rstar2.rollout.turn_router.RoutedEngine`, which wraps this one).
"""

from __future__ import annotations

import dataclasses

from rstar2.actors.handling import BusyTrack
from rstar2.engine.protocol import Engine, GenerationOutput, SamplingParams
from rstar2.rollout.weight_gate import WeightGate
from rstar2.wire import EngineLoad


class TracedEngine:
    """The engine under the weight gate, its generations recorded as busy time."""

    def __init__(
        self, engine: Engine, busy: BusyTrack, max_model_len: int, gate: WeightGate
    ) -> None:
        self.engine = engine
        self.busy = busy
        self.max_model_len = max_model_len
        self.gate = gate

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        async with self.gate.turn() as version:
            with self.busy.unit():
                out = await self.engine.generate(request_id, prompt_ids, params)
        return dataclasses.replace(out, policy_version=version)

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    def stats(self) -> EngineLoad:
        return self.engine.stats()
