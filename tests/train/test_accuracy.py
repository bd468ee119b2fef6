"""avg@k with its 95% interval over problems, and the run's validation and test splits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rstar2.config import ConfigError
from rstar2.train.accuracy import Z95, eval_splits, score
from rstar2.train.config import load_train_config
from rstar2.train.run_state import load_split
from rstar2.wire import TrajectoryResult
from tests.trajectories import trajectory


def _result(problem: int, sample: int, reward: float) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=f"eval/0/{problem}/{sample}",
        step=0,
        kind="eval",
        answer="",
        trajectory=trajectory(
            prompt_id=f"eval/0/{problem}",
            sample=sample,
            token_ids=[],
            loss_mask=[],
            logprobs=[],
            prompt_len=0,
            reward=reward,
        ),
    )


def test_avg_at_k_and_its_interval_over_problems() -> None:
    # pass rates 1, 1/2, 1/2, 1/2, 1/2, 0 (k = 2): mean 1/2, sd sqrt(0.1), se sd / sqrt(6)
    rates = [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)]
    results = [_result(i, s, r) for i, pair in enumerate(rates) for s, r in enumerate(pair)]
    acc = score(results)
    half = Z95 * math.sqrt(0.1) / math.sqrt(6)
    assert (acc.mean, acc.problems, acc.samples) == (0.5, 6, 2)
    assert (acc.low, acc.high) == pytest.approx((0.5 - half, 0.5 + half))
    assert acc.as_dict()["ci95"] == [acc.low, acc.high]
    assert acc.as_dict()["tool_calls_mean"] == 0.0 and acc.rollout["response_tokens_mean"] == 0.0
    # pass@2: 5 of the 6 problems have a correct sample
    assert acc.pass_at_k == acc.as_dict()["pass_at_k"] == 5 / 6


def test_the_interval_is_clipped_and_empty_without_spread() -> None:
    assert (score([_result(0, 0, 1.0), _result(1, 0, 1.0)]).low) == 1.0
    one = score([_result(0, 0, 1.0), _result(1, 0, 0.0)])  # sd 0.707: half-width > 0.5
    assert (one.low, one.high) == (0.0, 1.0)
    assert score([]).problems == 0


def test_splits_are_disjoint_and_sized(smoke_config: Path) -> None:
    cfg = load_train_config(smoke_config, sets=["heldout_problems=3", "test_problems=5"])
    train = load_split(cfg, "train")
    validation, test = eval_splits(cfg, train)
    assert (len(validation), len(test)) == (3, 5)
    texts = [{p.problem for p in split} for split in (train, validation, test)]
    assert not texts[0] & texts[2] and not texts[1] & texts[2]
    with pytest.raises(ConfigError, match="test_problems"):
        eval_splits(load_train_config(smoke_config, sets=["test_problems=100"]), train)


def test_a_test_file_that_leaks_training_problems_is_refused(
    tmp_path: Path, smoke_config: Path
) -> None:
    rows = [{"problem": f"Compute {i} + 1.", "answer": str(i + 1)} for i in range(6)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[4]) + "\n")
    cfg = load_train_config(
        smoke_config,
        sets=[f"data={tmp_path / 'train.jsonl'}", f"test_data={tmp_path / 'test.jsonl'}",
              "test_problems=1"],
    )  # fmt: skip
    with pytest.raises(ConfigError, match="1 are not, e.g. 'Compute 4 \\+ 1.'"):
        eval_splits(cfg, load_split(cfg, "train"))
