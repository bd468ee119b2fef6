"""Name the actor that holds the graph back, with the evidence, and say what to change.

The rule (a pure function of the per-actor loads, the graph's edges and optional KV use):

    A steady pipeline runs at the pace of its slowest stage. That stage is *busy* nearly all
    the time, while the stages before it fill its queue and then block on it (backpressure),
    and the stages after it sit *idle* waiting for its output. Request/reply services (the
    sandbox, an inference engine) fit the same picture: the caller "waits" on the reply while
    the service is busy, so a saturated service is busy ~100% with requests queued in front of
    it, and its callers spend their time outside their own handling (the runtime counts that
    as "other"). A synchronous RL step is a pipeline that runs one phase at a time; there the
    actor whose phase takes the largest share of the step is busy the largest share of the
    time, so the same measure names it.

    So:  bottleneck = argmax over actors a of busy(a),   among actors with busy(a) >= 0.5,
    where busy(a) is the mean over a's instances of the fraction of wall time spent handling
    (an actor with N instances is saturated only when all N are busy). When two candidates are
    within 0.05 of each other, the one with work queued in front of it (queue depth p50, then
    max) wins: of two equally busy stages, the one that cannot keep up is the one with a queue.
    Blocked time is not busy time, so a stage that is mostly blocked on its consumer is never
    chosen over that consumer. When no actor is busy half of the time, nothing is saturated:
    the run is latency-bound (too little work in flight, or a driver waiting on a few slow
    requests) and no single actor is named; the report then points at the largest stage.

The evidence lists what supports the choice (its busy share, its queue, upstream actors
blocked on it or waiting on its replies, downstream actors idle for its output, the runner-up)
so a reader can check it. The advice comes from the actor's role, recognised by name
(sandbox, reward, engine/rollout, learner, scheduler), and from KV use for engines: a full KV
cache (use >= KV_FULL, or room for less than one more sequence) asks for a bigger KV budget,
otherwise for more engines.

What it does not do: measure anything (see `actor_load.py`) or know the trainer's config
keys beyond naming them in the advice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rstar2.profile.actor_load import ActorLoad
from rstar2.profile.recording import Edge

SATURATED = 0.5
"""An actor busy at least this share of the time can be the bottleneck."""
TIE = 0.05
"""Busy shares closer than this are a tie, broken by queue depth."""
KV_FULL = 0.9
"""KV use (fraction of capacity, p50) at or above which an engine is short of KV cache."""
_BLOCKED_EVIDENCE = 0.05
_WAITING_EVIDENCE = 0.3
_IDLE_EVIDENCE = 0.3


@dataclass(frozen=True)
class Bottleneck:
    actor: str | None
    """The bottleneck actor's name, or None when no actor is saturated."""
    evidence: list[str] = field(default_factory=list)
    """Measured facts that support the choice, one short sentence each."""
    advice: str = ""
    """What to change."""


def find_bottleneck(
    loads: Mapping[str, ActorLoad],
    edges: Sequence[Edge] = (),
    kv_use: Mapping[str, float] | None = None,
    kv_room: Mapping[str, float] | None = None,
) -> Bottleneck:
    """Apply the rule above. `edges` are the graph's connections; `kv_use` maps an actor to
    its median KV use in [0, 1] where engines report it, `kv_room` to the median number of
    further sequences its KV cache still had room for (below 1: it could not hold another)."""
    if not loads:
        raise ValueError("no actor loads to analyse (did the run record any stats?)")
    ranked = sorted(loads.values(), key=lambda a: a.busy, reverse=True)
    top = ranked[0]
    if top.busy < SATURATED:
        return Bottleneck(
            None,
            [
                f"no actor is busy {SATURATED:.0%} of the time; the busiest, {top.name}, is "
                f"busy {top.busy:.0%}"
            ],
            "nothing is saturated: the run is latency-bound; put more work in flight (more "
            "prompts or samples per step, more concurrent agent loops) or shorten the largest "
            "stage of the step",
        )
    near = [a for a in ranked if a.busy >= SATURATED and top.busy - a.busy <= TIE]
    chosen = max(near, key=lambda a: (a.queue_p50, a.queue_max, a.busy))
    runner_up = next((a for a in ranked if a.name != chosen.name), None)
    evidence = _evidence(chosen, loads, edges, runner_up)
    kv = (kv_use or {}).get(chosen.name)
    if kv is not None:
        evidence.append(f"its KV use is {kv:.0%} of capacity (median)")
    room = (kv_room or {}).get(chosen.name)
    if room is not None:
        evidence.append(f"its KV cache had room for {room:.2g} more sequence(s) (median)")
    if room is not None and room < 1:
        kv = max(kv or 0.0, KV_FULL)
    return Bottleneck(chosen.name, evidence, advice_for(chosen, kv))


def _evidence(
    chosen: ActorLoad,
    loads: Mapping[str, ActorLoad],
    edges: Sequence[Edge],
    runner_up: ActorLoad | None,
) -> list[str]:
    out = [f"{chosen.name} is busy {chosen.busy:.0%} of the time ({chosen.instances} instance(s))"]
    if chosen.queue_max > 0:
        out.append(
            f"work queues in front of it: queue depth p50 {chosen.queue_p50:g}, "
            f"max {chosen.queue_max}"
        )
    for edge in edges:
        if edge.downstream != chosen.name or edge.upstream not in loads:
            continue
        a = loads[edge.upstream]
        if a.blocked >= _BLOCKED_EVIDENCE:
            out.append(f"upstream {a.name} is blocked sending to it {a.blocked:.0%} of the time")
        elif edge.request and a.other >= _WAITING_EVIDENCE:
            out.append(
                f"caller {a.name} spends {a.other:.0%} outside its own handling "
                "(waiting on replies)"
            )
    for edge in edges:
        a = loads.get(edge.downstream)
        if edge.upstream == chosen.name and a is not None and a.idle >= _IDLE_EVIDENCE:
            out.append(f"downstream {a.name} is idle {a.idle:.0%} of the time, waiting for input")
    if runner_up is not None:
        out.append(f"next busiest: {runner_up.name} at {runner_up.busy:.0%}")
    return out


def advice_for(load: ActorLoad, kv_use: float | None = None) -> str:
    """What to change when `load`'s actor is the bottleneck, chosen by its role name."""
    name, n = load.name.lower(), load.instances
    if any(k in name for k in ("sandbox", "tool", "exec")):
        return (
            f"add sandbox workers: raise the sandbox actor's count (now {n}) or its "
            "executor pool size; tool calls wait for a free worker"
        )
    if any(k in name for k in ("reward", "verif", "judge")):
        return (
            f"add reward capacity: raise the reward actor's count (now {n}) or its "
            "verifier worker processes, or lower the verification timeout"
        )
    if any(k in name for k in ("engine", "rollout", "gen")):
        if kv_use is not None and kv_use >= KV_FULL:
            return (
                "give the engines a bigger KV budget (engine memory utilisation / KV "
                "tokens): the KV cache is full, so requests wait or are preempted"
            )
        return f"add engines: raise the rollout actor's count (now {n})"
    if any(k in name for k in ("learner", "train", "update")):
        return (
            "the policy update dominates the step: use more learner devices or a larger "
            "micro-batch, or overlap rollout with the update; more engines or sandbox "
            "workers will not help"
        )
    if any(k in name for k in ("scheduler", "router")):
        return "the scheduler's per-message work is the limit: make its decision cheaper"
    return f"add instances of {load.name} (count, now {n}) or make its handling faster"
