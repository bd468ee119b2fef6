"""`rstar2 bench bus --json`: the documented keys, figures that agree with each other, and the
sender's CPU time carried through the runtime (a `Source` -> `RateSink` graph) as through raw."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.commands import bench_bus
from rstar2.commands.bench_bus import Run, percentile

KEYS = {"transport", "runtime_msgs_per_s", "raw_msgs_per_s", "ratio", "rtt_p50_ms", "rtt_p99_ms"}


def test_bench_bus_json_on_two_transports(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-q", "bench", "bus", "--json", "--messages", "400", "--repeats", "1"]
    assert main([*argv, "--round-trips", "20", "--transports", "inproc,ipc"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["transport"] for r in rows] == ["inproc", "ipc"]
    for r in rows:
        assert KEYS <= set(r)
        assert r["ratio"] == pytest.approx(r["runtime_msgs_per_s"] / r["raw_msgs_per_s"], abs=2e-3)
        assert 0 < r["rtt_p50_ms"] <= r["rtt_p99_ms"]
        for side in ("runtime_cpu_us_per_msg", "raw_cpu_us_per_msg"):
            assert r[side]["send"] > 0 and r[side]["recv"] > 0, r
        runtime = sum(r["runtime_cpu_us_per_msg"].values())
        raw = sum(r["raw_cpu_us_per_msg"].values())
        assert r["cpu_ratio"] == pytest.approx(raw / runtime, rel=0.01)


def dies_at_once(*_args: object) -> None:
    """A raw side's peer (spawned: importable by name) that ends before it sends anything."""
    raise SystemExit(3)


@pytest.mark.parametrize("transport", ["inproc", "ipc"])
def test_a_raw_peer_that_ends_early_stops_the_bench_with_a_message(
    transport: str, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    """It used to wait in `recv` for ever. inproc's peer is a thread that sends 3 of the 10
    messages (they are received, then the bench stops); ipc's a process that exits with 3."""
    monkeypatch.setattr(bench_bus, "PEER_CHECK_MS", 100)
    if transport == "inproc":
        send = bench_bus._raw_send
        monkeypatch.setattr(bench_bus, "_raw_send", lambda e, n, size, ctx: send(e, 3, size, ctx))
        why = r"the raw side's peer ended before its last message"
    else:
        monkeypatch.setattr(bench_bus, "_raw_send", dies_at_once)
        why = r"the raw side's peer ended \(exit code 3\) before its last message"
    start = time.monotonic()
    with pytest.raises(SystemExit, match=f"^bench bus: {why}$"):
        bench_bus.raw_throughput(transport, 10, 16, str(short_tmp))
    assert time.monotonic() - start < 30


def test_bench_bus_never_imports_torch() -> None:
    # `bench` imported every target's module for its flags: torch (seconds) for the bus too
    code = (
        "import sys; from rstar2.cli import main; "
        "argv = ['-q', 'bench', 'bus', '--json', '--messages', '100', '--repeats', '1', "
        "'--round-trips', '10', '--transports', 'inproc']; "
        "print(main(argv), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 False", (done.stdout, done.stderr)


def test_run_adds_both_ends_and_percentile_is_nearest_rank() -> None:
    assert Run(1.0, 0.5, 0.25).cpu_us == 0.75
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.99) == 4.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_bad_arguments_exit_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "bench", "bus", "--transports", "carrier-pigeon"]) == 2
    assert "--transports" in capsys.readouterr().err


def test_bench_bus_busy_thread_reports_each_switch_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--busy-thread`: round trips alone and beside a Python-bound thread at each interval
    (the figures are measurements, printed; here only their shape), and the process's own
    switch interval back as it was."""
    before = sys.getswitchinterval()
    argv = ["-q", "bench", "bus", "--busy-thread", "--round-trips", "5", "--json"]
    assert main([*argv, "--switch-intervals-ms", "2,0.2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["switch_interval_ms"] for r in rows] == [2.0, 0.2]
    for r in rows:
        assert 0 < r["busy_rtt_p50_ms"] <= r["busy_rtt_p99_ms"] and r["rtt_p50_ms"] > 0
        assert r["thread_loops_per_s"] > 0 and r["busy_thread_loops_per_s"] > 0
    assert sys.getswitchinterval() == before
    assert main(["-q", "bench", "bus", "--busy-thread", "--round-trips", "3"]) == 0
    out = capsys.readouterr().out
    assert "beside a thread that only runs Python" in out and len(out.splitlines()) == 5
