"""The worker's request handler, run in-process (pytest runs tests in the main thread)."""

from __future__ import annotations

import threading
import time

import pytest

from rstar2.reward.verify_worker import check, run_with_alarm
from rstar2.wire import VerifyRequest


@pytest.mark.parametrize(
    ("extracted", "reference", "status"),
    [
        ("2\\sqrt{2}", "\\sqrt{8}", "equal"),
        ("\\frac{1}{2}", "0.5", "equal"),
        ("x = 5", "5", "equal"),
        ("7", "8", "unequal"),
        ("zz!!??", "5", "unequal"),
    ],
)
def test_check_verdicts(extracted: str, reference: str, status: str) -> None:
    reply = check(VerifyRequest(7, extracted, reference, 30.0))
    assert (reply.id, reply.status) == (7, status)


def test_pathological_answer_times_out() -> None:
    reply = check(VerifyRequest(1, "9^{9^{9^{9}}}", "1", 0.3))
    assert reply.status == "timeout"
    assert "0.3" in reply.message


def test_run_with_alarm_returns_value_and_rejects_bad_timeout() -> None:
    assert run_with_alarm(lambda: 3, 1.0) == 3
    with pytest.raises(ValueError, match="timeout_s"):
        run_with_alarm(lambda: 3, 0.0)


def test_run_with_alarm_interrupts_python_loop() -> None:
    def spin() -> None:
        while True:
            time.sleep(0.01)

    with pytest.raises(TimeoutError):
        run_with_alarm(spin, 0.05)


def test_run_with_alarm_refuses_other_threads() -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            run_with_alarm(lambda: 1, 1.0)
        except ValueError as e:
            errors.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])
