"""`rstar2 bench bus`'s raw batched side: as many messages per frame as the runtime packs,
every message received, and its figures in the JSON next to the unbatched ones."""

from __future__ import annotations

import json

import pytest

from rstar2.actors.outbox import PACK_BYTES
from rstar2.cli import main
from rstar2.commands.bench_bus import raw_batch, raw_batched_throughput


def test_raw_batch_has_the_runtimes_limits() -> None:
    assert raw_batch(1024) == 59  # 60 KiB frames of ~1 KB messages (docs: "~58 to a frame")
    assert raw_batch(0) == 64  # small messages: the graph's default batch
    assert raw_batch(0, batch=8) == 8
    assert raw_batch(2 * PACK_BYTES) == 1  # too big to share a frame


@pytest.mark.timeout(30)
@pytest.mark.parametrize("n", [2, 59, 130])
def test_raw_batched_receives_every_message_in_whole_and_partial_frames(
    n: int, tmp_path: object
) -> None:
    # 130 = two full frames of 59 and a last one of 12; a count off by a frame would hang
    # (the receiver waits for messages that never come) or fail the sender's CPU figure
    run = raw_batched_throughput("inproc", n, 1024, str(tmp_path))
    assert run.msgs_per_s > 0 and run.send_cpu_us > 0


def test_bench_bus_json_reports_the_batched_side(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-q", "bench", "bus", "--json", "--messages", "400", "--repeats", "1"]
    assert main([*argv, "--round-trips", "20", "--transports", "inproc"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["raw_batch"] == 59
    assert row["batched_ratio"] == pytest.approx(
        row["runtime_msgs_per_s"] / row["raw_batched_msgs_per_s"], rel=0.01
    )
    assert row["raw_batched_cpu_us_per_msg"]["send"] > 0
    runtime = sum(row["runtime_cpu_us_per_msg"].values())
    batched = sum(row["raw_batched_cpu_us_per_msg"].values())
    assert row["batched_cpu_ratio"] == pytest.approx(batched / runtime, rel=0.01)
    lo, hi = row["raw_batched_range"]
    assert lo <= row["raw_batched_msgs_per_s"] <= hi
