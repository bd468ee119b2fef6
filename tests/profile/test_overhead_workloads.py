"""`rstar2 profile --overhead`'s built-in workloads: the request/reply pair records one span per
message (the pipeline coalesces runs), and the command reports every workload."""

from __future__ import annotations

import json

import pytest

from rstar2.cli import main
from rstar2.profile import overhead
from rstar2.profile.overhead import demo_pipeline, request_reply
from rstar2.profile.workload import record_graph_blocking


def _spans(kind: str, actor: str, rec: object) -> int:
    return sum(1 for s in rec.spans if s.kind == kind and s.actor.startswith(actor))  # type: ignore[attr-defined]


def test_request_reply_records_a_span_per_message_where_the_pipeline_coalesces() -> None:
    _, rr = record_graph_blocking(request_reply(200))
    assert _spans("handle", "echo", rr) == 200
    assert _spans("reply", "pinger", rr) == 200
    _, pipe = record_graph_blocking(demo_pipeline(2000))
    assert _spans("handle", "sink", pipe) < 2000  # runs of back-to-back messages: one span each


def test_overhead_json_reports_both_builtin_workloads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = {"pipeline": lambda: demo_pipeline(300), "request_reply": lambda: request_reply(50)}
    monkeypatch.setattr(overhead, "WORKLOADS", small)
    monkeypatch.setattr("rstar2.commands.profile.WORKLOADS", small)
    assert main(["-q", "profile", "--overhead", "--repeats", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [w["name"] for w in doc["workloads"]] == ["pipeline", "request_reply"]
    for w in doc["workloads"]:
        assert w["overhead"] == pytest.approx(w["on_s"][0] / w["off_s"][0] - 1)
    assert doc["target"] == overhead.TARGET
