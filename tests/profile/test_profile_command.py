"""`rstar2 profile`'s exit code: a graph in which an actor failed is exit code 1, after the
report of the run until then is written; a run cut by `--timeout` is a report like any other."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rstar2.actors.running_graph import GraphResult
from rstar2.cli import main
from rstar2.commands import profile as command
from rstar2.profile.recording import Recording
from rstar2.wire import ActorFailed
from tests.profile.profile_factories import recording, span


@pytest.mark.parametrize(("reason", "code"), [("failed", 1), ("stop()", 0), ("stopped", 0)])
def test_a_failed_actor_is_exit_code_1_after_the_report(
    reason: str,
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures = [ActorFailed("rollout.0", "Traceback ...\nModelFileError: x")] * (reason == "failed")

    def recorded(args: argparse.Namespace) -> tuple[GraphResult, Recording]:
        return GraphResult(reason, failures=failures), recording(
            [span("rollout.0", "handle", 0, 0.5)]
        )

    monkeypatch.setattr(command, "_record", recorded)
    out = tmp_path / "prof"
    assert main(["-q", "profile", "--steps", "1", "--out", str(out)]) == code
    assert (out / "report.txt").is_file() and (out / "trace.json").is_file()
    assert ("FAILED rollout.0" in capsys.readouterr().err) == (reason == "failed")


def test_actors_that_failed_before_recording_anything_are_one_line_and_exit_code_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a failure at start (a model that does not load) left no stats: "no actor loads to
    # analyse" was a ValueError traceback after the actor's own
    failed = [ActorFailed("rollout.0", "Traceback ...\nModelFileError: x")]
    monkeypatch.setattr(
        command, "_record", lambda args: (GraphResult("failed", failures=failed), recording([]))
    )
    assert main(["profile", "--steps", "1", "--out", str(tmp_path / "prof")]) == 1
    assert "FAILED rollout.0" in capsys.readouterr().err
    assert "before any actor recorded its load" in caplog.text
    assert not (tmp_path / "prof" / "report.txt").exists()
