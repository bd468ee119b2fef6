"""Configuration of the rollout scheduler: which policy, and the knobs each policy reads.

One dataclass, loaded with `rstar2.config.from_dict` and validated on load. It does not say
how many engines there are: that comes from the deployment (or the simulator's `--gpus`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from rstar2.config import require

PolicyName = Literal["static", "round_robin", "least_outstanding", "prefix_aware", "kv_aware"]
POLICY_NAMES: tuple[PolicyName, ...] = get_args(PolicyName)
COMPARED_POLICIES = (*POLICY_NAMES, "kv_aware_max")
"""The names the simulator compares: every policy, and kv_aware_max (kv_aware with the literal
rStar2 "max" reservation); `compared_config` gives the config of each."""


@dataclass
class SchedulerConfig:
    policy: PolicyName = "kv_aware"
    """Routing policy: static (VERL v0.2 even split), round_robin, least_outstanding (verl
    default, sticky), prefix_aware (SGLang router style) or kv_aware (rStar2)."""
    reservation: Literal["max", "predicted"] = "predicted"
    """kv_aware: reserve prompt + predicted response x predicted_scale per trajectory
    ('predicted', the default) or prompt + max response ('max': the literal rStar2 rule, which
    cannot preempt but leaves reserved KV idle)."""
    predicted_scale: float = 0.5
    """kv_aware 'predicted': factor on the predicted response length. Below 1 over-commits on
    purpose: trajectories on one engine reach their full length at different times."""
    move_turns: bool = True
    """Ask the policy about every later turn, which may then run on another engine (kv_aware
    'predicted': off a saturated or overloaded engine; round_robin: always). In the live graph
    the rollout worker asks the scheduler before each later turn and has another worker's
    engine generate it when told to. False: every turn stays on its trajectory's first engine,
    without asking (live and in `rstar2 sim --no-turn-moves`)."""
    overload_factor: float = 1.3
    """kv_aware 'predicted' with move_turns: a later turn also moves when its engine holds more
    KV than this times the least-used engine's plus 2% of its capacity (a heavy-tailed step
    rebalances at turn grain). 1.3 was chosen on simulated steps (docs/sim.md); larger moves
    fewer turns."""
    sticky_guard: bool = True
    """least_outstanding / prefix_aware: move a turn off its engine when that engine is
    saturated (waiting > 0 or too little free KV). False reproduces pure stickiness (thrash)."""
    balance_abs_threshold: int = 32
    """prefix_aware: loads are imbalanced when max - min exceeds this (SGLang default 32)..."""
    balance_rel_threshold: float = 1.0001
    """...and max exceeds min times this (SGLang default 1.0001)."""
    cache_threshold: float = 0.5
    """prefix_aware: minimum prefix match rate to follow the cache (SGLang default 0.5)."""

    def validate(self) -> None:
        require(self.predicted_scale > 0, "predicted_scale", self.predicted_scale, "> 0")
        require(self.overload_factor >= 1.0, "overload_factor", self.overload_factor, ">= 1.0")
        require(
            self.balance_abs_threshold >= 0,
            "balance_abs_threshold",
            self.balance_abs_threshold,
            ">= 0",
        )
        require(
            self.balance_rel_threshold >= 1.0,
            "balance_rel_threshold",
            self.balance_rel_threshold,
            ">= 1.0",
        )
        require(
            0.0 <= self.cache_threshold <= 1.0, "cache_threshold", self.cache_threshold, "in [0, 1]"
        )


def compared_config(name: str) -> SchedulerConfig:
    """The SchedulerConfig one name of `COMPARED_POLICIES` stands for, with default knobs."""
    if name == "kv_aware_max":
        return SchedulerConfig(policy="kv_aware", reservation="max")
    for policy in POLICY_NAMES:
        if policy == name:
            return SchedulerConfig(policy=policy)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(COMPARED_POLICIES)}")
