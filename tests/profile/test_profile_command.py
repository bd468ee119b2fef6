"""`rstar2 profile` on graphs where, in turn, each actor is the bottleneck.

The synthetic train-shaped graph (learner -> rollout x2 -> engine / sandbox services ->
reward -> learner, all sleep-based) is run with one actor slowed: the sandbox (one worker,
slow tool code), the reward actor (slow verification), the engine (one sequence of KV room)
and the learner (slow update). The analysis must name that actor each time.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.profile.chrome_trace import check_chrome_trace

ADVICE = {
    "sandbox": "sandbox workers",
    "reward": "reward capacity",
    "engine": "bigger KV budget",
    "learner": "policy update",
}


def _profile(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["-q", "profile", *args, "--out", str(tmp_path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("slow", ["sandbox", "reward", "engine", "learner"])
def test_profile_names_the_slowed_actor(
    slow: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _profile(tmp_path, capsys, "--synthetic", slow)
    assert doc["bottleneck"] == slow, doc
    assert ADVICE[slow] in doc["advice"]
    assert doc["actors"][slow]["busy"] >= 0.5
    assert set(doc["actors"]) == {"learner", "rollout", "engine", "sandbox", "reward"}
    assert set(doc["stages"]) == {"rollout", "learner"}
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert check_chrome_trace(trace) == []
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"learner.0", "rollout.0", "rollout.1", "engine.0", "sandbox.0", "reward.0"} <= threads
    assert json.loads((tmp_path / "report.json").read_text())["bottleneck"] == slow


def test_profile_runs_a_graph_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = tmp_path / "g.toml"
    graph.write_text(
        '[graph]\nname = "p"\nedges = ["source.out -> sink.in"]\n'
        '[[graph.actors]]\nname = "source"\ncls = "rstar2.actors.demo:Source"\n'
        "params = { n = 50 }\n"
        '[[graph.actors]]\nname = "sink"\ncls = "rstar2.actors.demo:SlowSink"\n'
        "params = { n = 50, delay_s = 0.01 }\n"
    )
    doc = _profile(tmp_path / "out", capsys, "--graph", str(graph))
    assert set(doc["actors"]) == {"source", "sink"}
    assert doc["actors"]["source"]["msgs_per_s"] > 0
    assert (tmp_path / "out" / "trace.json").is_file()


@pytest.mark.parametrize(
    "extra", [["--set", "seed=1"], ["--sft"], ["--rollout-only"], ["--model", "m"]]
)
def test_trainer_options_are_refused_for_other_workloads(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if extra[0] == "--model":  # a real model directory, so that the combination is refused
        (tmp_path / "config.json").write_text("{}")
        extra = ["--model", str(tmp_path)]
    assert main(["profile", "--synthetic", "reward", *extra]) == 2
    assert "for the trainer" in capsys.readouterr().err


def test_a_model_dir_without_a_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "--model", str(tmp_path), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "not a model, checkpoint or run directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("sandbox.extra_latency_s=-1", "sandbox.extra_latency_s"),
        ("sandbox.extra_latency_s=5", "sandbox.extra_latency_s"),  # = the tool-call timeout
        ("reward.extra_latency_s=-0.5", "reward.extra_latency_s"),
        ("learner.epochs=0", "learner.epochs"),
    ],
)
def test_bad_what_if_settings_name_their_key(
    setting: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", "--set", setting, "--out", str(tmp_path)]) == 2
    assert f"config key '{key}'" in capsys.readouterr().err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # refused before running


def test_zero_steps_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "--steps", "0"])
    assert exit_info.value.code == 2
    assert "argument --steps: expected an integer >= 1" in capsys.readouterr().err


def test_overhead_reports_both_sides(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = tmp_path / "g.toml"
    graph.write_text(
        '[graph]\nname = "o"\nedges = ["source.out -> sink.in"]\n'
        '[[graph.actors]]\nname = "source"\ncls = "rstar2.actors.demo:Source"\n'
        "params = { n = 300 }\n"
        '[[graph.actors]]\nname = "sink"\ncls = "rstar2.actors.demo:Sink"\nparams = { n = 300 }\n'
    )
    assert (
        main(["-q", "profile", "--overhead", "--graph", str(graph), "--repeats", "2", "--json"])
        == 0
    )
    (doc,) = json.loads(capsys.readouterr().out)["workloads"]
    assert doc["name"] == "graph"
    assert len(doc["on_s"]) == len(doc["off_s"]) == 2
    on, off = doc["on_s"], doc["off_s"]
    assert doc["overhead"] == pytest.approx(statistics.median(on) / statistics.median(off) - 1)
    assert min(on + off) > 0


@pytest.mark.parametrize("argv", [["--help"], ["profile", "--help"], ["top", "--help"]])
def test_help_texts_render(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert "usage: rstar2" in capsys.readouterr().out
