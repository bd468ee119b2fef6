"""scripts/install.sh (`make install`) says what it does while pip runs (issue 34 row 17: it was
silent for about a minute), and shows pip's whole output when pip fails. Run against a fake
virtual environment (VENV) whose pip prints what a real one does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PIP_OUTPUT = """\
Obtaining file:///work/main
  Installing build dependencies: started
  Installing build dependencies: finished with status 'done'
  Preparing editable metadata (pyproject.toml): started
Collecting torch>=2.4 (from rstar2==0.1.0)
  Downloading torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl (174.7 MB)
Requirement already satisfied: anyio>=4.4 in ./.venv/lib/python3.11/site-packages
Installing collected packages: torch, rstar2
Successfully installed rstar2-0.1.0 torch-2.5.1+cpu
"""


def fake_venv(tmp_path: Path, exit_code: int) -> dict[str, str]:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "pip-output").write_text(PIP_OUTPUT)
    (bin_dir / "pip").write_text(f"#!/bin/sh\ncat {tmp_path / 'pip-output'}\nexit {exit_code}\n")
    tools = tmp_path / "tools"  # a bwrap on PATH: the script must not apt-get one
    tools.mkdir()
    (tools / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    for f in (bin_dir / "python", bin_dir / "pip", tools / "bwrap"):
        f.chmod(0o755)
    return {**os.environ, "VENV": str(tmp_path / "venv"), "PATH": f"{tools}:{os.environ['PATH']}"}


def install(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_install_says_each_step_and_package(tmp_path: Path) -> None:
    proc = install(fake_venv(tmp_path, 0))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[:6] == [
        "install: installing rstar2 and its dependencies with pip (a minute or two the first time)",
        "install:   pip: build dependencies",
        "install:   pip: package metadata",
        "install:   pip: collecting torch>=2.4",
        "install:   pip: downloading torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl (174.7MB)",
        "install:   pip: installing 2 package(s), torch among them (~1 GB)",
    ]
    assert lines[6] == "install:   pip: installed" and lines[7].startswith("install: done in ")
    assert "Requirement already satisfied" not in proc.stderr


def test_a_failing_pip_shows_its_whole_output(tmp_path: Path) -> None:
    proc = install(fake_venv(tmp_path, 3))
    assert proc.returncode == 3
    assert "install: pip failed (exit code 3); its output:" in proc.stderr
    assert "Requirement already satisfied: anyio" in proc.stderr
