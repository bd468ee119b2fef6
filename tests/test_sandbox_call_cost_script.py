"""scripts/sandbox_call_cost.py: a sandbox call's CPU by process, on a real executor."""

from __future__ import annotations

import json

import pytest

from tests.script_module import load_script

sandbox_call_cost = load_script("sandbox_call_cost")


@pytest.mark.slow
def test_the_calls_cpu_is_split_between_caller_zygote_and_children(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """100 calls: all answered, and each side's CPU counted (a child's only once the zygote
    reaped it, which it has by the time the call is answered)."""
    assert sandbox_call_cost.main(["--calls", "100", "--concurrency", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["calls"], got["concurrency"], got["failed"]) == (100, 2, 0)
    assert got["calls_per_s"] > 0 and got["caller_ms"] > 0
    assert got["zygote_ms"] > 0 and got["children_ms"] > 0, got
    assert got["children_faults"] > 0, got  # a child writes at least its stack's pages
    assert any(p["own_ms"] == got["zygote_ms"] for p in got["processes"])


def test_bad_counts_are_refused() -> None:
    with pytest.raises(SystemExit):
        sandbox_call_cost.main(["--calls", "0"])
