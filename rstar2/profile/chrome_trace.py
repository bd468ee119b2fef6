"""Chrome trace event JSON (opens in Perfetto and chrome://tracing) from a Recording.

Layout:
- one process (pid) per OS process of the graph, named after it ("main", "workers", ...);
  tracks whose process is unknown (extra tracks of an unknown instance) go to "extra";
- one thread (tid) per actor instance ("sandbox.0"), and one per extra track
  ("rollout.0/engine", "sandbox.0/worker3"); spans that overlap on one track (an engine with
  several generations in flight) are spread over lanes "<track> #2", "#3", ... because the
  format only nests slices, it cannot draw two that partly overlap on one thread;
- every span is a complete event (`"ph": "X"`, `ts` and `dur` in microseconds from the
  recording's start), named by its kind ("handle", "wait", "blocked", or an extra kind);
- counters (`"ph": "C"`): "<instance> queue depth" from the spans' queue depth (a sample per
  change), and every `Counter` of the recording (KV use, running requests, ...).

`check_chrome_trace` lists what is wrong with a trace object (empty list: valid); the tests and
`rstar2 profile` use it so a broken trace is caught where it is written.

What it does not do: align clocks across hosts (span times are each host's wall clock).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from rstar2.profile.recording import Recording, role_of
from rstar2.whole_file import write_text
from rstar2.wire import Span

US = 1e6
_EXTRA_PROCESS = "extra"
_PHASES = {"X", "C", "M"}


class _Ids:
    """Stable small integers for processes and threads, in first-use order."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[str, str], int] = {}

    def pid(self, process: str) -> int:
        return self.pids.setdefault(process, len(self.pids) + 1)

    def tid(self, process: str, track: str) -> int:
        return self.tids.setdefault((process, track), len(self.tids) + 1)


def chrome_trace(rec: Recording) -> dict[str, Any]:
    """The trace as a JSON-ready dict: {"traceEvents": [...], "displayTimeUnit": "ms"}."""
    process_of = {s.actor: s.process for s in rec.stats}
    origin = _origin(rec)
    ids = _Ids()
    events: list[dict[str, Any]] = []
    for track, spans in _by_track(rec.spans + rec.extra_spans).items():
        process = _process(track, process_of)
        for lane, lane_spans in enumerate(_lanes(spans)):
            name = track if lane == 0 else f"{track} #{lane + 1}"
            tid = ids.tid(process, name)
            events.extend(_span_event(s, origin, ids.pid(process), tid) for s in lane_spans)
    events.extend(_queue_counters(rec, origin, process_of, ids))
    for c in sorted(rec.counters, key=lambda c: c.time):
        pid = ids.pid(_process(c.track, process_of))
        events.append(_counter_event(f"{c.track} {c.name}", c.time, c.value, origin, pid))
    return {"traceEvents": _metadata(ids) + events, "displayTimeUnit": "ms"}


def write_chrome_trace(rec: Recording, path: str | Path) -> Path:
    """Write the trace to `path` (checked first: a ValueError names the first problem)."""
    trace = chrome_trace(rec)
    problems = check_chrome_trace(trace)
    if problems:
        raise ValueError(f"refusing to write an invalid trace: {problems[0]}")
    return write_text(Path(path), json.dumps(trace, separators=(",", ":")))


def _origin(rec: Recording) -> float:
    """Time zero of the trace: the window's start, or an earlier span or sample."""
    times = [s.start for s in rec.spans + rec.extra_spans] + [c.time for c in rec.counters]
    return min([rec.start, *times])


def _by_track(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        out[s.actor].append(s)
    return {track: sorted(group, key=lambda s: (s.start, s.end)) for track, group in out.items()}


def _lanes(spans: list[Span]) -> list[list[Span]]:
    """Greedy interval partitioning: each lane holds spans that do not overlap (sorted input)."""
    lanes: list[list[Span]] = []
    for s in spans:
        for lane in lanes:
            if lane[-1].end <= s.start:
                lane.append(s)
                break
        else:
            lanes.append([s])
    return lanes


def _process(track: str, process_of: dict[str, str]) -> str:
    instance = track.split("/", 1)[0]
    return process_of.get(instance, _EXTRA_PROCESS)


def _us(t: float, origin: float) -> float:
    return round((t - origin) * US, 3)


def _span_event(s: Span, origin: float, pid: int, tid: int) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if s.port:
        args["port"] = s.port
    if s.queue_depth:
        args["queue_depth"] = s.queue_depth
    return {
        "name": s.kind,
        "cat": role_of(s.actor.split("/", 1)[0]),
        "ph": "X",
        "ts": _us(s.start, origin),
        "dur": round(max(0.0, s.end - s.start) * US, 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _counter_event(name: str, t: float, value: float, origin: float, pid: int) -> dict[str, Any]:
    return {"name": name, "ph": "C", "ts": _us(t, origin), "pid": pid, "args": {"value": value}}


def _queue_counters(
    rec: Recording, origin: float, process_of: dict[str, str], ids: _Ids
) -> list[dict[str, Any]]:
    """A queue-depth sample at each runtime span where the depth changed, per instance."""
    events = []
    for instance, spans in _by_track(rec.spans).items():
        pid = ids.pid(_process(instance, process_of))
        last = -1
        for s in spans:
            if s.queue_depth != last:
                name = f"{instance} queue depth"
                events.append(_counter_event(name, s.start, s.queue_depth, origin, pid))
                last = s.queue_depth
    return events


def _metadata(ids: _Ids) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for process, pid in ids.pids.items():
        events.append(_meta("process_name", pid, 0, process))
    for (process, track), tid in ids.tids.items():
        events.append(_meta("thread_name", ids.pid(process), tid, track))
    return events


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def check_chrome_trace(trace: Any) -> list[str]:
    """Problems that would stop Perfetto from loading `trace` (empty list when valid).

    Checked: the top-level object and its "traceEvents" list; per event the required keys and
    their types (name str, ph one of X/C/M, pid/tid int, ts a finite number >= 0 for X and C,
    dur >= 0 for X, numeric args for C); complete events in non-decreasing ts order per track.
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["top level must be an object with a 'traceEvents' list"]
    problems: list[str] = []
    last_ts: dict[tuple[int, int], float] = {}
    for i, ev in enumerate(trace["traceEvents"]):
        problems.extend(f"event {i}: {p}" for p in _event_problems(ev))
        if not problems and ev["ph"] == "X":
            key = (ev["pid"], ev["tid"])
            if ev["ts"] < last_ts.get(key, 0.0):
                problems.append(f"event {i}: ts {ev['ts']} goes back on track {key}")
            last_ts[key] = ev["ts"]
        if problems:
            break
    return problems


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _event_problems(ev: Any) -> list[str]:
    if not isinstance(ev, dict):
        return ["not an object"]
    if not isinstance(ev.get("name"), str) or ev.get("ph") not in _PHASES:
        return [f"needs a string 'name' and 'ph' in {sorted(_PHASES)}: {ev!r}"]
    if not isinstance(ev.get("pid"), int) or not isinstance(ev.get("tid", 0), int):
        return [f"'pid' and 'tid' must be integers: {ev!r}"]
    if ev["ph"] == "M":
        return [] if isinstance(ev.get("args"), dict) else ["metadata needs 'args'"]
    if not _is_number(ev.get("ts")) or ev["ts"] < 0:
        return [f"'ts' must be a number >= 0 (microseconds): {ev!r}"]
    if ev["ph"] == "X" and not (_is_number(ev.get("dur")) and ev["dur"] >= 0):
        return [f"complete event needs 'dur' >= 0: {ev!r}"]
    if ev["ph"] == "C":
        args = ev.get("args")
        if not (isinstance(args, dict) and args and all(_is_number(v) for v in args.values())):
            return [f"counter needs numeric 'args': {ev!r}"]
    return []
