"""The Chrome trace writer: structure Perfetto needs, tracks, lanes, counters; the checker."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from profile_factories import T0, recording, span

from rstar2.profile.chrome_trace import check_chrome_trace, chrome_trace, write_chrome_trace
from rstar2.profile.recording import Counter
from rstar2.wire import ActorStats, Span


def _sample_recording():
    spans = [
        span("learner.0", "wait", 0.0, 0.25),
        span("learner.0", "handle", 0.25, 0.5, depth=2),
        span("sandbox.0", "handle", 0.1, 0.2, depth=1),
        span("sandbox.0", "handle", 0.15, 0.3),  # overlaps the previous one
        span("sandbox.0", "blocked", 0.3, 0.35),
    ]
    rec = recording(
        spans,
        extra_spans=[Span("rollout.0/engine", "generate", T0 + 0.05, T0 + 0.4)],
        counters=[Counter("rollout.0/engine", "kv_used", T0 + 0.2, 0.75)],
    )
    rec.stats[1] = ActorStats("sandbox.0", "workers", busy_s=0.25, blocked_s=0.05)
    rec.stats.append(ActorStats("rollout.0", "main"))
    return rec


def _names(trace: dict, kind: str) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == kind
    }


def test_trace_is_valid_chrome_json_with_required_fields(tmp_path: Path) -> None:
    path = write_chrome_trace(_sample_recording(), tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    assert check_chrome_trace(trace) == []
    for ev in trace["traceEvents"]:
        assert {"name", "ph", "pid"} <= set(ev)
        assert isinstance(ev["pid"], int)
        if ev["ph"] in ("X", "C"):
            assert isinstance(ev["ts"], float | int) and ev["ts"] >= 0
    last: dict[tuple[int, int], float] = defaultdict(float)
    for ev in (e for e in trace["traceEvents"] if e["ph"] == "X"):
        assert ev["ts"] >= last[(ev["pid"], ev["tid"])]
        last[(ev["pid"], ev["tid"])] = ev["ts"]


def test_timestamps_are_microseconds_from_the_window_start() -> None:
    trace = chrome_trace(_sample_recording())
    handle = next(
        e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["name"] == "handle" and e["cat"] == "learner"
    )
    assert handle["ts"] == pytest.approx(250_000.0)
    assert handle["dur"] == pytest.approx(250_000.0)
    assert handle["args"] == {"port": "in", "queue_depth": 2}


def test_one_track_per_instance_and_extra_track_and_process() -> None:
    trace = chrome_trace(_sample_recording())
    threads = _names(trace, "thread_name")
    processes = _names(trace, "process_name")
    assert set(processes.values()) == {"main", "workers"}
    assert {"learner.0", "sandbox.0", "sandbox.0 #2", "rollout.0/engine"} == set(threads.values())
    # the engine track sits in the process of its instance (rollout.0 runs in "main")
    pid_of = {name: pid for (pid, _), name in threads.items()}
    main_pid = next(pid for (pid, _), name in processes.items() if name == "main")
    assert pid_of["rollout.0/engine"] == main_pid
    assert pid_of["sandbox.0"] != main_pid


def test_overlapping_spans_go_to_separate_lanes() -> None:
    trace = chrome_trace(_sample_recording())
    threads = _names(trace, "thread_name")
    lane_of = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "sandbox":
            lane_of[threads[(e["pid"], e["tid"])]].append(round(e["ts"]))
    assert lane_of == {"sandbox.0": [100_000, 300_000], "sandbox.0 #2": [150_000]}


def test_counters_for_queue_depth_changes_and_kv_use() -> None:
    trace = chrome_trace(_sample_recording())
    counters = [(e["name"], e["args"]["value"]) for e in trace["traceEvents"] if e["ph"] == "C"]
    assert ("rollout.0/engine kv_used", 0.75) in counters
    sandbox_depths = [v for n, v in counters if n == "sandbox.0 queue depth"]
    assert sandbox_depths == [1, 0]  # one sample per change, not per span


@pytest.mark.parametrize(
    "event, problem",
    [
        ({"name": "x", "ph": "X", "pid": 1, "tid": 1, "ts": -1.0, "dur": 1.0}, "'ts'"),
        ({"name": "x", "ph": "X", "pid": 1, "tid": 1, "ts": 1.0}, "'dur'"),
        ({"name": "x", "ph": "C", "pid": 1, "ts": 1.0, "args": {"v": "high"}}, "numeric"),
        ({"name": "x", "ph": "B", "pid": 1, "tid": 1, "ts": 1.0}, "'ph'"),
        ({"name": "x", "ph": "X", "pid": "1", "tid": 1, "ts": 1.0, "dur": 1.0}, "integers"),
    ],
)
def test_checker_names_bad_events(event: dict, problem: str) -> None:
    problems = check_chrome_trace({"traceEvents": [event]})
    assert len(problems) == 1 and problem in problems[0]


def test_checker_catches_time_going_back_on_a_track() -> None:
    ev = {"name": "x", "ph": "X", "pid": 1, "tid": 1, "dur": 1.0}
    problems = check_chrome_trace({"traceEvents": [{**ev, "ts": 5.0}, {**ev, "ts": 2.0}]})
    assert problems and "goes back" in problems[0]
    assert check_chrome_trace([]) != []


def test_spans_before_the_window_shift_time_zero() -> None:
    rec = recording([span("a.0", "handle", 0.0, 0.5)])
    rec.spans.append(Span("a.0", "wait", T0 - 0.1, T0))
    trace = chrome_trace(rec)
    assert check_chrome_trace(trace) == []
    assert min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "X") == 0.0
