"""The CLI bounds how long torch's OpenMP threads spin, unless the user chose a policy."""

from __future__ import annotations

import os

import pytest

from rstar2.cli import GOMP_SPINCOUNT, main


def test_main_bounds_the_openmp_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert main([]) == 0  # no command: prints the help
    assert os.environ["GOMP_SPINCOUNT"] == GOMP_SPINCOUNT == "10000"
    assert "OMP_WAIT_POLICY" not in os.environ


@pytest.mark.parametrize(
    ("env", "key", "value"),
    [({"OMP_WAIT_POLICY": "PASSIVE"}, "OMP_WAIT_POLICY", "PASSIVE"),
     ({"GOMP_SPINCOUNT": "0"}, "GOMP_SPINCOUNT", "0")],
)  # fmt: skip
def test_main_keeps_the_users_openmp_choice(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], key: str, value: str
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main([]) == 0
    assert os.environ[key] == value
    if key == "OMP_WAIT_POLICY":
        assert "GOMP_SPINCOUNT" not in os.environ
