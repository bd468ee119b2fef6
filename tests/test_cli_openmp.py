"""The CLI makes torch's OpenMP threads wait passively unless the user chose otherwise."""

from __future__ import annotations

import os

import pytest

from rstar2.cli import main


def test_main_sets_a_passive_openmp_wait_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert main([]) == 0  # no command: prints the help
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_main_keeps_the_users_openmp_wait_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert main([]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
