"""A tiny policy that calls the tool, for profile runs on the real trainer graph.

`build_tool_policy(dir)` runs `rstar2 train`'s own SFT stage (`prepare_policy`) on a smaller
tiny model (hidden 64, 2 layers, 0.21M parameters) and an easier task (one-digit operands, at
most two), 500 steps at a constant lr of 2e-2: about 60 s on one torch thread (2 shared cores).

Measured (torch 2.13 CPU, transformers 5.23) as pass@1 on the first 40 held-out problems x 4
samples at temperature 1, with the rollout settings the profile runs use (the tiny default's
`[rollout]`, stage rl1's 160-token budget; without `--config` eval would show the tool time
and 1000 output characters the SFT traces never had, and the policy then answers ~never):

    rstar2 eval --model DIR/model-sft --config rstar2/configs/tiny.toml --data HELDOUT.jsonl
        --samples 4 --temperature 1 --max-tokens 160 --max-turns 4

(HELDOUT.jsonl: `write_jsonl(generate_problems(TaskConfig(min_digits=1, max_digits=1,
max_operands=2), "heldout")[:40], ...)`). With lr 2e-2 constant, by SFT steps, for `sft.seed`
0 (the one built here), 1, 2 and `model.tiny.seed=1`:

    steps   SFT s  seed 0   seed 1   seed 2   model seed 1
    300      ~40    21%      40%      35%      15%
    400      ~50     2%      64%      50%      61%
    500      ~60    61%      81%      70%      86%
    600      ~70    70%      67%      82%      76%

It is learnt late and fast (100 steps: ~3%; the answers are well-formed long before they are
right), and lr 2e-2 has spikes: seed 0 collapses at 400 (its JSON breaks, 2%) and is back at
425; every 25 steps from 425 to 600, seeds 0 and 1 stay at 56-81%. 300 steps (21% here, 38%
when written) left the one-step live-turn-moves run with no reward. lr 1e-2 learns more slowly
and varies more by seed (500 steps: 65%, 48%, 8%, 55%, 52%); hidden 128 costs twice
as much per step (300 steps: 47% and 26% in 60 s). Runs that start from it must use its task
(`ToolPolicy.sets`).

What it does not do: cache across sessions (conftest.py builds it once per session) or
check the policy (the tests that use it do, through their metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rstar2.train.config import load_train_config
from rstar2.train.runner import prepare_policy

TASK = [
    "task.min_digits=1",
    "task.max_digits=1",
    "task.max_operands=2",
    "task.ops=+-*",
    "task.word_fraction=0.5",
    "task.word_style=templates",
]
"""The easy task the policy is SFT'd on (and that runs from it must use): half bare, half
templated word problems with one-digit operands (not the default's stories, which a policy of
500 SFT steps does not solve)."""
MODEL_AND_SFT = [
    "model.tiny.hidden_size=64",
    "model.tiny.num_layers=2",
    "model.tiny.intermediate_size=192",
    "demo_task.word_fraction=0.5",  # the demonstrations are of the task itself
    "demo_task.word_style=templates",
    "sft.train_problems=4000",
    "sft.mistake_fraction=0.15",
    "sft.steps=500",
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

    def rl_sets(self, steps: int, *extra: str) -> list[str]:
        """`--set` overrides of a short RL run from it that earns reward (so every step
        updates the policy): its task, 4 prompts x 4 rollouts, no SFT, no evaluation during
        the run, lr 1e-3 from the first step, one stage of `steps` steps; `extra` on top."""
        return [
            *self.sets, f"model.path={self.path}", "sft.steps=0",
            "prompts_per_step=4", "rollouts_per_prompt=4", "rl.group_size=2", "test_problems=0",
            "eval_every=0", "graph.engine_threads=1", "learner.lr=1e-3", "learner.warmup_steps=0",
            f'stages=[{{"name": "rl1", "steps": {steps}, "max_response_tokens": 160}}]', *extra,
        ]  # fmt: skip


def build_tool_policy(run_dir: Path) -> ToolPolicy:
    """SFT the policy in `run_dir` (as `rstar2 train` would) and say how to run from it."""
    cfg = load_train_config(None, sets=[*MODEL_AND_SFT, *TASK])
    return ToolPolicy(prepare_policy(cfg, run_dir), list(TASK))
