"""The learner benchmark's batches: fixed, RL-shaped, and the shapes of a run's rollout trace
(written here by the trainer's own `trace_record`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rstar2.learner.workload import fixed_batch, rl_batch, trace_batch, turn_mask
from rstar2.train.rollout_trace import trace_record


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """(bit, length) runs of a loss mask."""
    out: list[list[int]] = []
    for bit in mask:
        if out and out[-1][0] == bit:
            out[-1][1] += 1
        else:
            out.append([bit, 1])
    return [(b, n) for b, n in out]


def test_turn_mask_and_the_fixed_batch() -> None:
    assert turn_mask(2, [(3, 1), (2, 0)]) == [0, 0, 1, 1, 1, 0, 1, 1]
    batch = fixed_batch(100, 3, 16)
    assert [len(r.token_ids) for r in batch.rollouts] == [16, 16, 16]
    assert batch.rollouts[0].loss_mask == [0] * 4 + [1] * 12
    assert batch.rollouts[0].logprobs[4] == pytest.approx(-math.log(100))
    assert batch.advantages == [-1.0, 1.0, -1.0]
    assert fixed_batch(100, 3, 16).rollouts[1].token_ids == batch.rollouts[1].token_ids


def test_the_rl_batch_has_varied_lengths_masked_prompts_and_tool_responses() -> None:
    batch = rl_batch(1000, 64, 2048, seed=3)
    lengths = [len(r.token_ids) for r in batch.rollouts]
    assert max(lengths) <= 2048 and min(lengths) >= 2048 // 16
    assert len(set(lengths)) > 32  # varied, not one length
    turns = []
    for r in batch.rollouts:
        shape = runs(r.loss_mask)
        assert shape[0][0] == 0 and 2048 // 16 <= shape[0][1] <= 2048 // 8  # the prompt
        assert shape[-1][0] == 1  # ends on a model turn
        turns.append(sum(1 for b, _ in shape if b == 1))
        assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.loss_mask, strict=True) if not m)
    assert min(turns) == 1 and max(turns) >= 3  # single- and multi-turn rollouts
    assert rl_batch(1000, 64, 2048, seed=3).rollouts[5].loss_mask == batch.rollouts[5].loss_mask
    with pytest.raises(ValueError):
        rl_batch(1000, 4, 32)


def test_the_trace_batch_takes_a_steps_shapes(tmp_path: Path) -> None:
    trace = tmp_path / "rollout_trace.jsonl"
    masks = {1: [0, 0, 0, 1, 1, 0, 0, 1], 2: [0, 0, 1, 1, 1, 1]}
    lines = [
        trace_record(f"p{step}", 3 if step == 1 else 2, 64, mask, [0.1], step=step)
        for step, mask in masks.items()
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    last = trace_batch(trace, 50, 3)
    assert [r.loss_mask for r in last.rollouts] == [masks[2]] * 3
    first = trace_batch(trace, 50, 2, step=1)
    assert [r.loss_mask for r in first.rollouts] == [masks[1]] * 2
    with pytest.raises(ValueError, match="step 7"):
        trace_batch(trace, 50, 2, step=7)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no trajectories"):
        trace_batch(tmp_path / "empty.jsonl", 50, 2)
