"""A tiny policy that calls the tool, for profile runs on the real trainer graph.

`build_tool_policy(dir)` runs `rstar2 train`'s own SFT stage (`prepare_policy`) on a smaller
tiny model (hidden 64, 2 layers, 0.21M parameters) and an easier task (one-digit operands, at
most two), 300 steps at a constant lr of 2e-2: about 40 s on one torch thread. Measured on 40
held-out problems x 4 samples at temperature 1 (`rstar2 eval`: the real agent loop and
sandbox; 2 shared cores): after 100 steps (13 s) 91% of the rollouts end with an answer, 1.23
tool calls each, but pass@1 is 3%; after 200 (26 s) 97%, 1.09 calls, 5%; after 300 (38 s)
96%, 1.05 calls and 38% (copying the numbers into the code and the answer is learnt late and
fast). Well-formed calls and answers need only 100 steps; the learner case needs groups with
mixed rewards, hence 300. Runs that start from it must use its task (`ToolPolicy.sets`).

What it does not do: cache across sessions (conftest.py builds it once per session) or
check the policy (the tests that use it do, through their metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rstar2.train.config import load_train_config
from rstar2.train.runner import prepare_policy

TASK = ["task.min_digits=1", "task.max_digits=1", "task.max_operands=2"]
"""The easy task the policy is SFT'd on (and that runs from it must use)."""
MODEL_AND_SFT = [
    "model.tiny.hidden_size=64",
    "model.tiny.num_layers=2",
    "model.tiny.intermediate_size=192",
    "sft.steps=300",
    "sft.lr=0.02",
    "sft.min_lr_ratio=1.0",
    "sft.log_every=100",
]


@dataclass(frozen=True)
class ToolPolicy:
    path: Path
    """The SFT'd model directory (a Hugging Face model, for `--model`)."""
    sets: list[str]
    """`--set` overrides a run from it needs: its task."""


def build_tool_policy(run_dir: Path) -> ToolPolicy:
    """SFT the policy in `run_dir` (as `rstar2 train` would) and say how to run from it."""
    cfg = load_train_config(None, sets=[*MODEL_AND_SFT, *TASK])
    return ToolPolicy(prepare_policy(cfg, run_dir), list(TASK))
