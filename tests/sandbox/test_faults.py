"""Seeded fault injection (`sandbox.fault_rate`): rate, reproducibility, what the model reads."""

from __future__ import annotations

import anyio
import pytest

from rstar2.config import ConfigError
from rstar2.rollout.tool_response import format_result
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor
from rstar2.sandbox.faults import TRANSIENT_ERROR, fault_draw, injected_fault
from rstar2.wire import ExecRequest

N = 20_000


def request(seed: int | None, rid: str = "p/0/t0") -> ExecRequest:
    return ExecRequest(id=rid, code="print(1)", seed=seed)


@pytest.mark.parametrize("rate", [0.05, 0.2, 0.5])
def test_the_fault_rate_is_respected(rate: float) -> None:
    faults = [injected_fault(request(seed), rate) for seed in range(N)]
    hit = [f for f in faults if f is not None]
    # binomial: 4 standard deviations of N * rate
    assert abs(len(hit) - N * rate) < 4 * (N * rate * (1 - rate)) ** 0.5
    timeouts = sum(f.status == "timeout" for f in hit)
    assert abs(timeouts - len(hit) / 2) < 4 * (len(hit) / 4) ** 0.5
    assert {f.status for f in hit} == {"timeout", "killed"}


def test_zero_never_fails() -> None:
    assert all(injected_fault(request(seed), 0.0) is None for seed in range(N))


def outcome(seed: int, rate: float, rid: str = "p/0/t0") -> tuple[str, str] | None:
    fault = injected_fault(request(seed, rid), rate)
    return None if fault is None else (fault.status, fault.stderr)


def test_the_same_seed_meets_the_same_fault() -> None:
    first = [outcome(seed, 0.3) for seed in range(2000)]
    # a rerun (another process, other ids, any timing) meets the same faults
    assert [outcome(seed, 0.3, rid="other/id") for seed in range(2000)] == first
    # a higher rate keeps every fault of a lower one (u < 0.1 implies u < 0.3)
    low = [outcome(seed, 0.1) for seed in range(2000)]
    assert all(hi == lo for lo, hi in zip(low, first, strict=True) if lo is not None)


def test_without_a_seed_the_request_id_keys_the_draw() -> None:
    assert fault_draw(request(None, "a/0/t1")) == fault_draw(request(None, "a/0/t1"))
    assert fault_draw(request(None, "a/0/t1")) != fault_draw(request(None, "a/0/t2"))
    assert fault_draw(request(7)) == fault_draw(request(7, "anything"))


def test_what_the_model_reads_and_that_it_is_not_infrastructure() -> None:
    hit = [f for seed in range(200) if (f := injected_fault(request(seed), 0.5)) is not None]
    timeout = next(f for f in hit if f.status == "timeout")
    transient = next(f for f in hit if f.status == "killed")
    assert format_result(timeout, max_chars=100, show_time=False) == "Tool call failure\ntimeout\n"
    text = format_result(transient, max_chars=100, show_time=False)
    assert text == f"Tool call failure\nkilled\n{TRANSIENT_ERROR}"
    assert all(f.infra == "" for f in hit)  # noise the model must cope with, never masked


def test_the_executor_answers_a_faulted_call_without_running_it() -> None:
    faulted = next(s for s in range(100) if injected_fault(request(s), 0.5) is not None)

    async def main() -> tuple[str, int]:
        ex = Executor(SandboxConfig(fault_rate=0.5))  # never booted: no zygote to run code
        result = await ex.run(request(faulted))
        return result.status, ex.stats().faults

    status, faults = anyio.run(main)
    assert status in ("timeout", "killed") and faults == 1


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_the_rate_must_be_in_zero_one(rate: float) -> None:
    with pytest.raises(ConfigError, match="sandbox.fault_rate"):
        SandboxConfig(fault_rate=rate).validate()
