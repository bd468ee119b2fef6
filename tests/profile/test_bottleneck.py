"""The bottleneck rule as a pure function of loads, edges and KV use."""

from __future__ import annotations

import pytest
from profile_factories import load

from rstar2.profile.bottleneck import find_bottleneck
from rstar2.profile.recording import Edge

EDGES = [
    Edge("learner", "rollout"),
    Edge("rollout", "sandbox", request=True),
    Edge("rollout", "reward"),
    Edge("reward", "learner"),
]


def test_the_busiest_saturated_actor_is_named_with_its_evidence() -> None:
    loads = {
        "learner": load("learner", 0.05, idle=0.9),
        "rollout": load("rollout", 0.1, blocked=0.6),
        "reward": load("reward", 0.9, queue_p50=5, queue_max=64),
        "sandbox": load("sandbox", 0.3),
    }
    b = find_bottleneck(loads, EDGES)
    assert b.actor == "reward"
    text = " | ".join(b.evidence)
    assert "busy 90%" in text
    assert "queue depth p50 5, max 64" in text
    assert "upstream rollout is blocked" in text
    assert "downstream learner is idle 90%" in text
    assert "next busiest: sandbox at 30%" in text
    assert "reward" in b.advice and "count (now 1)" in b.advice


def test_callers_waiting_on_a_service_are_evidence() -> None:
    loads = {"rollout": load("rollout", 0.0, idle=0.1), "sandbox": load("sandbox", 0.95)}
    b = find_bottleneck(loads, EDGES)
    assert b.actor == "sandbox"
    assert any("caller rollout spends 90%" in e for e in b.evidence)
    assert "sandbox workers" in b.advice


def test_a_near_tie_goes_to_the_actor_with_work_queued() -> None:
    loads = {
        "reward": load("reward", 0.93, queue_p50=0),
        "sandbox": load("sandbox", 0.9, queue_p50=6, queue_max=10),
    }
    assert find_bottleneck(loads).actor == "sandbox"
    loads["reward"] = load("reward", 0.99)  # a clear lead is not overturned by a queue
    assert find_bottleneck(loads).actor == "reward"


def test_nothing_saturated_names_no_actor() -> None:
    b = find_bottleneck({"a": load("a", 0.3), "b": load("b", 0.45)})
    assert b.actor is None
    assert "busiest, b, is busy 45%" in b.evidence[0]
    assert "latency-bound" in b.advice


def test_engine_advice_depends_on_kv_use() -> None:
    loads = {"engine": load("engine", 0.9, instances=2)}
    full = find_bottleneck(loads, kv_use={"engine": 0.97})
    assert "bigger KV budget" in full.advice
    assert any("KV use is 97%" in e for e in full.evidence)
    roomy = find_bottleneck(loads, kv_use={"engine": 0.4})
    assert "add engines" in roomy.advice and "now 2" in roomy.advice


@pytest.mark.parametrize(
    "name, words",
    [("learner", "policy update"), ("scheduler", "scheduler"), ("postproc", "instances of")],
)
def test_advice_by_role(name: str, words: str) -> None:
    assert words in find_bottleneck({name: load(name, 0.8)}).advice


def test_no_loads_is_an_error() -> None:
    with pytest.raises(ValueError, match="no actor loads"):
        find_bottleneck({})


def test_a_stream_producer_is_not_called_a_caller() -> None:
    loads = {"rollout": load("rollout", 0.0, idle=0.1), "reward": load("reward", 0.95)}
    b = find_bottleneck(loads, EDGES)
    assert b.actor == "reward"
    assert not any("caller" in e or "upstream" in e for e in b.evidence)


def test_an_engine_without_room_for_another_sequence_asks_for_kv() -> None:
    loads = {"engine": load("engine", busy=0.95), "learner": load("learner", busy=0.05)}
    tight = find_bottleneck(loads, kv_use={"engine": 0.6}, kv_room={"engine": 0.4})
    assert "bigger KV budget" in tight.advice
    assert any("room for 0.4 more" in e for e in tight.evidence)
    roomy = find_bottleneck(loads, kv_use={"engine": 0.6}, kv_room={"engine": 3.0})
    assert "add engines" in roomy.advice
