"""The profile report: per-actor load, per-step stage split, engine idle ratio, bottleneck.

`build_report(recording)` is a pure function; `report_json` gives the `--json` shape
(`bottleneck`, `actors`: name -> busy/idle/blocked/msgs_per_s, `stages`: name -> seconds per
step, plus details), and `format_report` the text a person reads.

Conventions read from the recording (see `recording.py`):
- counters named "kv_used" (a fraction of the KV capacity, 0..1) on a track "<instance>" or
  "<instance>/engine" give that actor's KV use, and "kv_room" (how many more sequences like
  the one sampled still fitted) its KV room; both feed the engine advice;
- the engine idle ratio is 1 - (time with a span on the track) / window, averaged over the
  engine tracks: extra tracks whose last part starts with "engine", and instances of an actor
  named "engine". Without any it is None ("not reported").

What it does not do: collect (see `workload.py`) or draw (see `chrome_trace.py`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rstar2.profile.actor_load import ActorLoad, actor_loads, percentile, union_length
from rstar2.profile.bottleneck import Bottleneck, find_bottleneck
from rstar2.profile.recording import Recording, role_of, stage_times
from rstar2.wire import Span

KV_COUNTER = "kv_used"
KV_ROOM_COUNTER = "kv_room"


@dataclass(frozen=True)
class Report:
    duration_s: float
    actors: dict[str, ActorLoad]
    stages: dict[str, float]
    """Stage name -> mean seconds per step (empty when no step rows were recorded)."""
    steps: int
    engine_idle: float | None
    bottleneck: Bottleneck
    kv_use: dict[str, float] = field(default_factory=dict)


def build_report(rec: Recording) -> Report:
    loads = actor_loads(rec)
    kv = kv_use(rec)
    room = kv_use(rec, KV_ROOM_COUNTER)
    return Report(
        duration_s=rec.duration,
        actors=loads,
        stages=mean_stages(rec.steps),
        steps=len(rec.steps),
        engine_idle=engine_idle_ratio(rec),
        bottleneck=find_bottleneck(loads, rec.edges, kv, room),
        kv_use=kv,
    )


def mean_stages(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Stage -> mean seconds per step over the rows that report it."""
    sums: dict[str, list[float]] = defaultdict(list)
    for row in steps:
        for stage, seconds in stage_times(row).items():
            sums[stage].append(seconds)
    return {stage: sum(v) / len(v) for stage, v in sums.items()}


def kv_use(rec: Recording, counter: str = KV_COUNTER) -> dict[str, float]:
    """Actor -> median of its `counter` samples ("kv_used" by default)."""
    samples: dict[str, list[float]] = defaultdict(list)
    for c in rec.counters:
        if c.name == counter:
            samples[role_of(c.track.split("/", 1)[0])].append(c.value)
    return {role: percentile(sorted(v), 0.5) for role, v in samples.items()}


def engine_idle_ratio(rec: Recording) -> float | None:
    tracks: dict[str, list[Span]] = defaultdict(list)
    for s in rec.extra_spans:
        if s.actor.rsplit("/", 1)[-1].startswith("engine"):
            tracks[s.actor].append(s)
    for s in rec.spans:
        if role_of(s.actor) == "engine" and s.kind == "handle":
            tracks[s.actor].append(s)
    if not tracks:
        return None
    idle = [1.0 - union_length(v, rec.start, rec.end) / rec.duration for v in tracks.values()]
    return sum(idle) / len(idle)


def report_json(report: Report) -> dict[str, Any]:
    b = report.bottleneck
    return {
        "bottleneck": b.actor,
        "evidence": b.evidence,
        "advice": b.advice,
        "actors": {
            name: {
                "busy": round(a.busy, 4),
                "idle": round(a.idle, 4),
                "blocked": round(a.blocked, 4),
                "other": round(a.other, 4),
                "msgs_per_s": round(a.msgs_per_s, 3),
                "queue_p50": a.queue_p50,
                "queue_max": a.queue_max,
                "instances": a.instances,
            }
            for name, a in report.actors.items()
        },
        "stages": {k: round(v, 6) for k, v in report.stages.items()},
        "steps": report.steps,
        "engine_idle": None if report.engine_idle is None else round(report.engine_idle, 4),
        "kv_use": {k: round(v, 4) for k, v in report.kv_use.items()},
        "duration_s": round(report.duration_s, 3),
    }


def format_report(report: Report) -> str:
    lines = [f"profile over {report.duration_s:.2f} s", ""]
    head = f"{'actor':<16}{'n':>3}{'busy':>7}{'idle':>7}{'blocked':>9}{'other':>7}"
    lines.append(head + f"{'msg/s':>9}{'queue p50':>11}{'max':>6}")
    for a in sorted(report.actors.values(), key=lambda a: -a.busy):
        lines.append(
            f"{a.name:<16}{a.instances:>3}{a.busy:>7.0%}{a.idle:>7.0%}{a.blocked:>9.0%}"
            f"{a.other:>7.0%}{a.msgs_per_s:>9.1f}{a.queue_p50:>11g}{a.queue_max:>6}"
        )
    if report.stages:
        total = sum(report.stages.values()) or 1.0
        lines += ["", f"per step (mean of {report.steps}):"]
        for stage, s in report.stages.items():
            lines.append(f"  {stage:<14}{s:>9.3f} s {s / total:>6.0%}")
    idle = "not reported" if report.engine_idle is None else f"{report.engine_idle:.0%}"
    lines += ["", f"engine idle ratio: {idle}", ""]
    b = report.bottleneck
    lines.append(f"bottleneck: {b.actor or 'none (no actor is saturated)'}")
    lines += [f"  - {e}" for e in b.evidence]
    lines.append(f"  change: {b.advice}")
    return "\n".join(lines)
