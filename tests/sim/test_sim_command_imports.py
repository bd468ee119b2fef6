"""`rstar2 sim` is the laptop command: everything but `calibrate --engine` runs without torch."""

from __future__ import annotations

import subprocess
import sys


def test_the_sim_command_does_not_import_torch() -> None:
    code = (
        "import sys; from rstar2.cli import main; "
        "code = main(['-q', 'sim', 'bound', '--gpus', '2', '--prompts', '2', '--json']); "
        "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "0 False False"
