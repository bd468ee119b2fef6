"""A train config small enough for the test suite (a tiny model, a few steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

SMOKE_TOML = """
seed = 0
prompts_per_step = 2
rollouts_per_prompt = 4
heldout_problems = 4
eval_every = 0
checkpoint_every = 1

[model.tiny]
hidden_size = 64
num_layers = 2
num_heads = 4
num_kv_heads = 2
intermediate_size = 128
corpus_problems = 200

[task]
train_size = 64
heldout_size = 8

[sft]
steps = 4
batch_size = 8
train_problems = 32
warmup_steps = 1
log_every = 2

[rl]
group_size = 2

[learner]
lr = 1e-3
warmup_steps = 0
micro_batch_size = 8

[rollout]
max_response_tokens = 48
max_turns = 2
tool_show_time = false

[engine]
kv_budget_tokens = 4096
max_num_seqs = 16

[sandbox]
concurrency = 2
preload = ["math"]

[reward]
workers = 1

[graph]
engine_threads = 1
learner_threads = 1

[[stages]]
name = "rl1"
steps = 2

[[stages]]
name = "rl3"
steps = 1
filter_solved = true
filter_samples = 2
filter_pool = 4
reset_optimizer = true
"""


@pytest.fixture
def smoke_config(tmp_path: Path) -> Path:
    path = tmp_path / "smoke.toml"
    path.write_text(SMOKE_TOML)
    return path
