"""Rollout scheduling policies shared by the live scheduler actor and the simulator.

`make_policy(config, num_engines)` builds the policy a `SchedulerConfig` names; the interface
every policy implements is documented in `rstar2.scheduler.policy`.
"""

from __future__ import annotations

from rstar2.scheduler.config import (
    COMPARED_POLICIES,
    POLICY_NAMES,
    SchedulerConfig,
    compared_config,
)
from rstar2.scheduler.kv_aware import KVAware
from rstar2.scheduler.least_outstanding import LeastOutstanding
from rstar2.scheduler.policy import EngineLoad, Policy, TurnRequest, is_saturated
from rstar2.scheduler.prefix_aware import PrefixAware
from rstar2.scheduler.round_robin import RoundRobin
from rstar2.scheduler.static_split import StaticSplit


def make_policy(config: SchedulerConfig, num_engines: int) -> Policy:
    """A fresh policy object for `num_engines` engines, as `config.policy` names it."""
    name = config.policy
    if name == "static":
        return StaticSplit(num_engines)
    if name == "round_robin":
        return RoundRobin(num_engines)
    if name == "least_outstanding":
        return LeastOutstanding(num_engines, sticky_guard=config.sticky_guard)
    if name == "prefix_aware":
        return PrefixAware(
            num_engines,
            balance_abs_threshold=config.balance_abs_threshold,
            balance_rel_threshold=config.balance_rel_threshold,
            cache_threshold=config.cache_threshold,
            sticky_guard=config.sticky_guard,
        )
    if name == "kv_aware":
        return KVAware(
            num_engines,
            config.reservation,
            config.predicted_scale,
            move_turns=config.move_turns,
            overload_factor=config.overload_factor,
        )
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")


__all__ = [
    "COMPARED_POLICIES",
    "POLICY_NAMES",
    "EngineLoad",
    "KVAware",
    "LeastOutstanding",
    "Policy",
    "PrefixAware",
    "RoundRobin",
    "SchedulerConfig",
    "StaticSplit",
    "TurnRequest",
    "compared_config",
    "is_saturated",
    "make_policy",
]
