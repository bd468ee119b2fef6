"""Recording helpers: roles, stage times, extras handed back in a graph's stop result."""

from __future__ import annotations

import pytest
from profile_factories import T0

from rstar2.profile.recording import Edge, Recording, extras_from_result, role_of, stage_times
from rstar2.profile.synthetic import synthetic_graph
from rstar2.profile.workload import graph_edges


def test_role_of_strips_only_a_numeric_index() -> None:
    assert role_of("sandbox.3") == "sandbox"
    assert role_of("learner") == "learner"
    assert role_of("v1.beta") == "v1.beta"


def test_stage_times_reads_time_keys_only() -> None:
    row = {
        "step": 3,
        "time_gen_s": 1.5,
        "time_sync_s": 2,
        "time_bad_s": "x",
        "loss": 0.1,
        "time_flag_s": True,
    }
    assert stage_times(row) == {"gen": 1.5, "sync": 2.0}


def test_extras_from_a_stop_result() -> None:
    result = {
        "profile": {
            "spans": [["rollout.0/engine", "generate", T0, T0 + 1]],
            "counters": [["engine.0", "kv_used", T0, 0.5]],
            "steps": [{"time_gen_s": 1.0}],
        }
    }
    spans, counters, steps = extras_from_result(result)
    assert [(s.actor, s.kind, s.end - s.start) for s in spans] == [
        ("rollout.0/engine", "generate", 1.0)
    ]
    assert [(c.track, c.name, c.value) for c in counters] == [("engine.0", "kv_used", 0.5)]
    assert steps == [{"time_gen_s": 1.0}]
    assert extras_from_result({"count": 3}) == ([], [], [])
    assert extras_from_result(None) == ([], [], [])


@pytest.mark.parametrize(
    "bad",
    [
        {"profile": {"spans": [["t", "k", 2.0]]}},
        {"profile": {"spans": [["t", "k", 2.0, 1.0]]}},
        {"profile": {"counters": ["t"]}},
    ],
)
def test_malformed_extras_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="profile"):
        extras_from_result(bad)


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="end after"):
        Recording(T0, T0)
    assert Recording(T0, T0 + 2).duration == 2


def test_graph_edges_mark_request_reply_ports() -> None:
    edges = graph_edges(synthetic_graph())
    assert Edge("rollout", "sandbox", request=True) in edges
    assert Edge("rollout", "reward", request=False) in edges
    assert len(edges) == 5
