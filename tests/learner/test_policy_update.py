"""The policy update: exact loss on a hand-built case, micro-batching invariance, weight flattening."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from rstar2.learner.policy_update import (
    LearnerConfig,
    make_lr_schedule,
    make_optimizer,
    pad_batch,
    token_logprobs,
    update_policy,
)
from rstar2.rl import RLConfig, TrainingBatch


class Bigram(nn.Module):
    """A tiny causal LM: logits of token t+1 depend only on token t."""

    def __init__(self, vocab: int = 5) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(vocab, vocab))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        @dataclass
        class Out:
            logits: torch.Tensor

        return Out(self.table[input_ids])


@dataclass
class R:
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]


def test_pad_batch_shapes_and_errors() -> None:
    ids, attn, mask, old = pad_batch([R([1, 2], [0, 1], [0.0, -1.0]), R([3], [0], [0.0])])
    assert ids.tolist() == [[1, 2], [3, 0]] and attn.tolist() == [[1, 1], [1, 0]]
    assert mask.tolist() == [[0.0, 1.0], [0.0, 0.0]] and old[0, 1] == -1.0
    with pytest.raises(ValueError):
        pad_batch([R([1, 2], [0], [0.0, 0.0])])
    with pytest.raises(ValueError):
        pad_batch([])


def test_loss_value_on_policy_is_minus_mean_advantage() -> None:
    """At ratio 1 the surrogate is A per token: loss = -(sum of A over model tokens)/tokens."""
    model = Bigram()
    uniform = float(torch.log(torch.tensor(1 / 5)))
    rollouts = [R([0, 1, 2], [0, 1, 1], [0.0, uniform, uniform]), R([0, 3], [0, 1], [0.0, uniform])]
    batch = TrainingBatch(rollouts=rollouts, advantages=[1.0, -1.0])
    cfg = LearnerConfig(lr=0.1, warmup_steps=0, micro_batch_size=8)
    opt = make_optimizer(model, cfg)
    metrics = update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig())
    # tokens: two with A=+1 and one with A=-1 -> loss = -(1 + 1 - 1) / 3
    assert metrics["loss"] == pytest.approx(-1 / 3, abs=1e-6)
    assert metrics["clip_fraction"] == 0.0
    # the update raised the logprob of rewarded transitions and lowered the penalised one
    logp, _ = token_logprobs(model, torch.tensor([[0, 1, 2]]), torch.ones(1, 3, dtype=torch.long))
    assert (logp > uniform).all()
    logp, _ = token_logprobs(model, torch.tensor([[0, 3]]), torch.ones(1, 2, dtype=torch.long))
    assert (logp < uniform).all()


def test_micro_batching_does_not_change_the_update() -> None:
    torch.manual_seed(0)
    base = Bigram()
    with torch.no_grad():
        base.table.normal_()
    rollouts = [
        R([0, 1, 2, 3], [0, 1, 1, 1], [0.0, -1.5, -1.7, -1.2]),
        R([1, 4], [0, 1], [0.0, -1.4]),
        R([2, 2, 0], [0, 0, 1], [0.0, 0.0, -1.9]),
    ]
    batch = TrainingBatch(rollouts=rollouts, advantages=[0.7, -1.2, 0.5])
    results = []
    for micro in (1, 2, 8):
        model = copy.deepcopy(base)
        cfg = LearnerConfig(lr=0.05, warmup_steps=0, micro_batch_size=micro)
        opt = make_optimizer(model, cfg)
        m = update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig())
        results.append((model.table.detach().clone(), m["loss"]))
    for table, loss in results[1:]:
        assert torch.allclose(table, results[0][0], atol=1e-6)
        assert loss == pytest.approx(results[0][1], abs=1e-6)


def test_epochs_repeat_the_passes_over_the_batch() -> None:
    """epochs=2 is two epochs=1 updates in a row: same weights, optimizer and schedule state."""
    torch.manual_seed(0)
    base = Bigram()
    with torch.no_grad():
        base.table.normal_()
    rollouts = [R([0, 1, 2], [0, 1, 1], [0.0, -1.5, -1.7]), R([1, 4], [0, 1], [0.0, -1.4])]
    batch = TrainingBatch(rollouts=rollouts, advantages=[0.9, -0.9])
    tables, steps = [], []
    for epochs, calls in ((2, 1), (1, 2)):
        model = copy.deepcopy(base)
        cfg = LearnerConfig(lr=0.05, warmup_steps=4, mini_batches=2, epochs=epochs)
        opt = make_optimizer(model, cfg)
        schedule = make_lr_schedule(opt, cfg)
        for _ in range(calls):
            update_policy(model, opt, schedule, batch, cfg, RLConfig())
        tables.append(model.table.detach().clone())
        steps.append(schedule.last_epoch)
    assert torch.allclose(tables[0], tables[1], atol=1e-7)
    assert steps == [4, 4]  # 2 mini-batches x 2 passes optimizer steps either way
    with pytest.raises(ValueError, match="learner.epochs"):
        LearnerConfig(epochs=0).validate()


def test_empty_batch_is_a_no_op() -> None:
    model = Bigram()
    cfg = LearnerConfig()
    opt = make_optimizer(model, cfg)
    m = update_policy(model, opt, make_lr_schedule(opt, cfg), TrainingBatch(), cfg, RLConfig())
    assert m["loss"] == 0.0 and torch.count_nonzero(model.table) == 0


def test_warmup_schedule() -> None:
    model = Bigram()
    cfg = LearnerConfig(lr=1.0, warmup_steps=3)
    opt = make_optimizer(model, cfg)
    sched = make_lr_schedule(opt, cfg)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])
