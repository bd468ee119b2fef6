"""`rstar2 train` answers its help and a config's errors without importing torch or
transformers (8.5-9.3 s of imports on the 2-core CI machine before), and so does every other
command's help (6.3-8.0 s before for the eight that imported them at the top of their module)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_HEAVY = ("torch", "transformers")

_RUN = """
import sys
from rstar2.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(code, *[name for name in {heavy!r} if name in sys.modules])
"""


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["train", "--help"], 0),
        (["train", "--set", "nope=1"], 2),  # an unknown key
        (["train", "--set", "learner.lr=-1"], 2),  # a bad value
        (["train", "--config", "/no/such/config.toml"], 2),
        (["bench", "train", "--help"], 0),
        (["bench", "train", "--steps", "1"], 2),
        (["bench", "learner", "--help"], 0),
        (["bench", "learner", "--ranks", "0"], 2),
        (["bench", "engine", "--help"], 0),
        (["profile", "--help"], 0),
        (["analyze", "--help"], 0),
        (["analyze", "t.jsonl", "--model", "/no/such/model"], 2),
        (["experiment", "--help"], 0),
        (["experiment", "--seeds", "x"], 2),
        (["init-model", "--help"], 0),
        (["convert", "--help"], 0),
    ],
)
def test_commands_answer_their_help_and_bad_input_without_torch(argv: list[str], code: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _RUN.format(heavy=_HEAVY), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split()[-1:] == [str(code)], (out.stdout[-2000:], out.stderr[-2000:])
