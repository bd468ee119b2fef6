"""Configuration of the reward pool (answer verification workers and their limits)."""

from __future__ import annotations

from dataclasses import dataclass

from rstar2.config import require


@dataclass
class RewardConfig:
    workers: int = 2
    """Verifier worker processes (each answers one math-verify request at a time)."""

    timeout_s: float = 5.0
    """Soft per-answer time limit: the worker's alarm stops math-verify and the result is
    reward 0 with status "timeout"."""

    kill_grace_s: float = 2.0
    """Extra time after `timeout_s` before the parent kills a worker that did not answer
    (stuck in C code the alarm cannot interrupt) and starts a replacement."""

    start_timeout_s: float = 60.0
    """How long a new worker may take to import math-verify and report ready."""

    memory_mb: int = 2048
    """Address-space limit of each worker in MiB (0 = no limit); past it, status "error"."""

    fast_path: bool = True
    """Decide answers the normaliser can prove equal (e.g. `1,000` vs `1000`) in the caller,
    without a worker round trip. Unequal normalised pairs always go to math-verify."""

    extra_latency_s: float = 0.0
    """What-if profiling: seconds added to the verification of every extracted answer (fast
    path included; a response without an answer costs nothing), holding one of the `workers`
    verifier slots meanwhile, as if verification were that much slower (a heavier checker,
    an LLM judge). With `workers = 1`, `rstar2 profile --set reward.extra_latency_s=0.2`
    shows a trainer held back by its reward actor. 0 = off."""

    def validate(self) -> None:
        require(self.workers >= 1, "reward.workers", self.workers, "an integer >= 1")
        require(self.timeout_s > 0, "reward.timeout_s", self.timeout_s, "a number > 0")
        require(self.kill_grace_s > 0, "reward.kill_grace_s", self.kill_grace_s, "a number > 0")
        require(
            self.start_timeout_s > 0,
            "reward.start_timeout_s",
            self.start_timeout_s,
            "a number > 0",
        )
        require(self.memory_mb >= 0, "reward.memory_mb", self.memory_mb, "an integer >= 0")
        require(
            self.extra_latency_s >= 0,
            "reward.extra_latency_s",
            self.extra_latency_s,
            "a number >= 0",
        )
