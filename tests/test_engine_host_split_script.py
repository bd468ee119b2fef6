"""scripts/engine_host_split.py on a few requests (a smoke test of the command)."""

from __future__ import annotations

import json

import pytest

from tests.script_module import load_script

split = load_script("engine_host_split")


@pytest.mark.parametrize("decode", ["fixed", "dynamic"])
def test_every_part_of_a_step_is_reported(decode: str, capsys) -> None:
    argv = ["--requests", "6", "--max-tokens", "8", "--decode", decode, "--json"]
    assert split.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    parts = out["ms_per_step"]
    assert out["decode"] == decode and out["steps"] >= 8
    expected = {"schedule", "batch", "update", "forward", "wait", "other"}
    if decode == "fixed":
        expected |= {"fill", "shape", "decode"}
    else:
        expected |= {"sample"}
    assert set(parts) == expected
    assert all(v >= 0 for v in parts.values())
    assert parts["forward"] > 0 and parts["update"] > 0


def test_a_multi_turn_workload_is_split_too(capsys) -> None:
    argv = ["--requests", "4", "--max-tokens", "8", "--turns", "2", "--json"]
    assert split.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["turns"] == 2 and out["prefill_steps"] > 1
    assert out["ms_per_step"]["forward"] > 0


def test_a_part_that_is_called_is_timed() -> None:
    spent = split.Counter()
    add = split.timed(spent, "add", lambda a, b: a + b)
    assert add(2, 3) == 5 and spent["add"] > 0


def test_the_ops_a_prefill_step_dispatches_are_counted(capsys) -> None:
    """`--count-ops`: the dynamic path's prefill step dispatches hundreds of ops; with
    `--prefill-graphs` the short prefills' fill is a handful of copies, their step (one graph
    replay on a GPU) the rest, and no prefill is left to the dynamic forward."""
    argv = ["--requests", "4", "--max-tokens", "8", "--turns", "2", "--count-ops", "--json"]
    assert split.main(argv) == 0
    dynamic = json.loads(capsys.readouterr().out)["aten_ops_per_prefill_step"]
    assert set(dynamic) == {"dynamic"} and dynamic["dynamic"] > 100
    assert split.main([*argv, "--prefill-graphs", "64"]) == 0
    graphed = json.loads(capsys.readouterr().out)["aten_ops_per_prefill_step"]
    assert set(graphed) == {"fixed_fill", "fixed_step"}, graphed
    assert graphed["fixed_fill"] <= 8 < graphed["fixed_step"]
