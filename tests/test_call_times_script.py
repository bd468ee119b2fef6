"""scripts/call_times.py: a named method timed inside a real `rstar2` command, and bad targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.train.config import Placement
from tests.script_module import load_script

call_times = load_script("call_times")

TARGET = "rstar2.train.config:Placement.processes_of"


def test_a_method_is_counted_and_timed_inside_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Placement, "processes_of", Placement.processes_of)  # put back after
    argv = ["--time", TARGET, "--json", "--", "train", "--dry-run", "--json"]
    argv += ["--run-dir", str(tmp_path / "run")]
    assert call_times.main(argv) == 0
    out = capsys.readouterr().out
    figures = json.loads(out[out.rindex("\n{") :])  # after the dry run's own JSON
    assert figures[TARGET]["calls"] >= 1
    assert figures[TARGET]["total_s"] > 0 and figures[TARGET]["median_us"] > 0


def test_thread_time_is_summed_per_call() -> None:
    record: list[float] = []
    wrapped = call_times.timed(lambda n: sum(range(n)), record)
    assert wrapped(10_000) == sum(range(10_000)) and wrapped(10) == 45
    assert len(record) == 2 and record[0] > 0
    figures = call_times.summary({"f": record})["f"]
    assert figures["calls"] == 2 and figures["total_s"] == pytest.approx(sum(record))


@pytest.mark.parametrize(
    "target", ["rstar2.train.config", "rstar2.nope:f", "rstar2.train.config:Placement.nope"]
)
def test_a_bad_target_is_refused(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert call_times.main(["--time", target, "--", "train", "--dry-run"]) == 2
    assert "call_times.py" in capsys.readouterr().err


def test_the_rstar2_arguments_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert call_times.main(["--time", TARGET]) == 2
    assert "usage" in capsys.readouterr().err
