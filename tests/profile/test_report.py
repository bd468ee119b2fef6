"""The report: stage split, KV use, engine idle ratio, JSON shape and text."""

from __future__ import annotations

import pytest
from profile_factories import T0, recording, span

from rstar2.profile.recording import Counter, Edge
from rstar2.profile.report import build_report, format_report, mean_stages, report_json
from rstar2.wire import Span


def _rec():
    spans = [
        span("engine.0", "handle", 0.0, 0.8, depth=2),
        span("learner.0", "wait", 0.0, 0.8),
        span("learner.0", "handle", 0.8, 1.0),
    ]
    return recording(
        spans,
        duration=1.0,
        steps=[{"time_gen_s": 1.0, "time_learner_s": 0.5}, {"time_gen_s": 3.0}],
        counters=[
            Counter("engine.0", "kv_used", T0 + t, v)
            for t, v in ((0.1, 0.9), (0.2, 1.0), (0.3, 0.95))
        ],
        edges=[Edge("learner", "engine", request=True), Edge("engine", "learner")],
    )


def test_mean_stages_per_step() -> None:
    assert mean_stages(_rec().steps) == {"gen": 2.0, "learner": 0.5}


def test_report_json_has_the_documented_keys() -> None:
    doc = report_json(build_report(_rec()))
    assert doc["bottleneck"] == "engine"
    assert set(doc["actors"]["engine"]) >= {"busy", "idle", "blocked", "msgs_per_s"}
    assert doc["actors"]["engine"]["busy"] == pytest.approx(0.8)
    assert doc["stages"] == {"gen": 2.0, "learner": 0.5}
    assert doc["kv_use"] == {"engine": 0.95}
    assert doc["engine_idle"] == pytest.approx(0.2)
    assert "bigger KV budget" in doc["advice"]


def test_engine_idle_from_extra_engine_tracks() -> None:
    rec = recording(
        [span("rollout.0", "wait", 0.0, 1.0)],
        duration=2.0,
        extra_spans=[
            Span("rollout.0/engine", "generate", T0, T0 + 0.5),
            Span("rollout.1/engine", "generate", T0 + 1, T0 + 2),
        ],
    )
    assert build_report(rec).engine_idle == pytest.approx((0.75 + 0.5) / 2)
    assert build_report(recording([span("a.0", "wait", 0.0, 1.0)])).engine_idle is None


def test_text_report_names_the_bottleneck_and_the_split() -> None:
    text = format_report(build_report(_rec()))
    assert "bottleneck: engine" in text
    assert "gen" in text and "80%" in text
    assert "engine idle ratio: 20%" in text
