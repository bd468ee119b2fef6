"""The policy update: exact loss on a hand-built case, micro-batching invariance, the
training-inference mismatch and truncated importance sampling on hand-built cases, and rollouts
sampled by the embedded engine from the learner's own model and from a perturbed copy."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.micro_batch import pad_batch, token_logprobs
from rstar2.learner.policy_update import make_lr_schedule, make_optimizer, update_policy
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig
from tests.engine.factories import random_prompts, tiny_qwen2


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


def test_the_entropy_bonus_reaches_the_gradient() -> None:
    """`rl.entropy_coef > 0` subtracts coef x entropy from the loss: the step must move the
    weights differently from coef 0, towards higher entropy (it was computed under no_grad,
    so the bonus changed the reported loss and nothing else)."""
    uniform = float(torch.log(torch.tensor(1 / 5)))
    rollouts = [R([0, 1, 2], [0, 1, 1], [0.0, uniform, uniform]), R([0, 3], [0, 1], [0.0, uniform])]
    batch = TrainingBatch(rollouts=rollouts, advantages=[1.0, -1.0])
    cfg = LearnerConfig(lr=0.1, warmup_steps=0, micro_batch_size=8)
    tables = []
    for coef in (0.0, 1.0):
        model = Bigram()
        with torch.no_grad():
            model.table.copy_(torch.arange(25.0).reshape(5, 5) / 10)  # a low-entropy start
        opt = make_optimizer(model, cfg)
        update_policy(
            model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig(entropy_coef=coef)
        )
        tables.append(model.table.detach().clone())
    assert not torch.allclose(tables[0], tables[1])

    def entropy(table: torch.Tensor) -> float:
        p = torch.softmax(table[0], -1)
        return float(-(p * p.log()).sum())

    assert entropy(tables[1]) > entropy(tables[0])


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


UNIFORM = math.log(1 / 5)  # every logprob of the all-zero Bigram


def shifted_batch(shifts: list[list[float]]) -> TrainingBatch:
    """Two rollouts of the zero Bigram whose recorded engine logprobs are the learner's
    (uniform) minus `shifts` on the sampled tokens; garbage on the prompt token."""
    r0 = R([0, 1, 2], [0, 1, 1], [7.0, UNIFORM - shifts[0][0], UNIFORM - shifts[0][1]])
    r1 = R([0, 3], [0, 1], [-math.inf, UNIFORM - shifts[1][0]])
    return TrainingBatch(rollouts=[r0, r1], advantages=[1.0, -1.0])


def sgd_update(
    batch: TrainingBatch, cfg: LearnerConfig, rl: RLConfig, model: nn.Module | None = None
) -> tuple[dict[str, float], nn.Module]:
    model = model or Bigram()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    return update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, rl), model


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_a_perturbed_engine_gives_exactly_its_shift_before_the_update(mini_batches: int) -> None:
    """Shifts of log 4, -log 2 and log 3: mean log(24) / 3, max log 4, whether the first step's
    forward measures them (one mini-batch) or a pre-pass does (two: the second mini-batch's
    forward comes after a large first update, so measuring there would give other figures)."""
    batch = shifted_batch([[math.log(4), -math.log(2)], [math.log(3)]])
    cfg = LearnerConfig(lr=5.0, warmup_steps=0, grad_clip=1e6, mini_batches=mini_batches)
    metrics, model = sgd_update(batch, cfg, RLConfig())
    assert metrics["logprob_mismatch_mean"] == pytest.approx(math.log(24) / 3, abs=1e-6)
    assert metrics["logprob_mismatch_max"] == pytest.approx(math.log(4), abs=1e-6)
    assert float(model.table.detach().abs().max()) > 0.5  # the update itself was large


def test_the_mismatch_metrics_are_zero_for_an_exact_engine_and_an_empty_batch() -> None:
    metrics, _ = sgd_update(shifted_batch([[0.0, 0.0], [0.0]]), LearnerConfig(), RLConfig())
    assert metrics["logprob_mismatch_mean"] == 0.0 and metrics["logprob_mismatch_max"] == 0.0
    empty, _ = sgd_update(TrainingBatch(), LearnerConfig(), RLConfig())
    assert empty["logprob_mismatch_mean"] == 0.0 and empty["logprob_mismatch_max"] == 0.0


def test_tis_weights_each_token_by_the_capped_learner_engine_ratio() -> None:
    """Raw weights exp(lp_learner - lp_engine) = [4, 0.5 | 3], capped at 2: w = [2, 0.5 | 2].
    On-policy (the ratio against the learner's own logprobs is 1, nothing clipped), the loss
    gradient on the zero Bigram's row a is -(1/N) sum_t w_t A_t (onehot(b_t) - 1/5) over the
    transitions a -> b_t, N = 3. One SGD step of lr 3 gives
    row 0 (0 -> 1 with w A = 2, 0 -> 3 with w A = -2) = [0, 2, 0, -2, 0] and
    row 1 (1 -> 2 with w A = 0.5) = [-0.1, -0.1, 0.4, -0.1, -0.1]."""
    batch = shifted_batch([[math.log(4), -math.log(2)], [math.log(3)]])
    cfg = LearnerConfig(lr=3.0, warmup_steps=0, grad_clip=1e6)
    metrics, model = sgd_update(batch, cfg, RLConfig(tis_cap=2.0))
    expected = torch.zeros(5, 5)
    expected[0] = torch.tensor([0.0, 2.0, 0.0, -2.0, 0.0])
    expected[1] = torch.tensor([-0.1, -0.1, 0.4, -0.1, -0.1])
    torch.testing.assert_close(model.table.detach(), expected, atol=1e-6, rtol=0)
    assert metrics["tis_weight_mean"] == pytest.approx(4.5 / 3, abs=1e-6)
    assert metrics["tis_truncated_fraction"] == pytest.approx(2 / 3, abs=1e-6)
    assert metrics["clip_fraction"] == 0.0
    assert metrics["loss"] == pytest.approx(-(2 + 0.5 - 2) / 3, abs=1e-6)


def test_asynchronous_rl_takes_the_decoupled_loss_with_untruncated_weights() -> None:
    """`rl.max_staleness > 0` without a cap: the clip is against the learner's pre-update
    logprobs (the proximal policy) and each token weighs exp(lp_learner - lp_engine) in full,
    w = [4, 0.5 | 3] (the engine's stale logprobs are the behaviour policy). One SGD step of
    lr 3, N = 3: row 0 = 4 (e1 - 0.2) - 3 (e3 - 0.2) = [-0.2, 3.8, -0.2, -3.2, -0.2], row 1 =
    0.5 (e2 - 0.2). The paper's loss (ratio against the engine's logprobs) would clip these
    tokens instead."""
    batch = shifted_batch([[math.log(4), -math.log(2)], [math.log(3)]])
    cfg = LearnerConfig(lr=3.0, warmup_steps=0, grad_clip=1e6)
    metrics, model = sgd_update(batch, cfg, RLConfig(max_staleness=1))
    expected = torch.zeros(5, 5)
    expected[0] = torch.tensor([-0.2, 3.8, -0.2, -3.2, -0.2])
    expected[1] = torch.tensor([-0.1, -0.1, 0.4, -0.1, -0.1])
    torch.testing.assert_close(model.table.detach(), expected, atol=1e-6, rtol=0)
    assert metrics["tis_weight_mean"] == pytest.approx(7.5 / 3, abs=1e-6)
    assert metrics["tis_truncated_fraction"] == 0.0
    assert metrics["clip_fraction"] == 0.0
    assert metrics["loss"] == pytest.approx(-(4 + 0.5 - 3) / 3, abs=1e-6)
    _, paper = sgd_update(batch, cfg, RLConfig())
    assert not torch.allclose(paper.table, model.table)


def test_tis_against_an_exact_engine_is_the_plain_update_over_several_steps() -> None:
    """Engine logprobs equal to the learner's: TIS's proximal logprobs (the pre-pass's, for
    every one of the 2 x 2 optimizer steps) are the engine's and every weight is 1, so the
    update is the plain one. Taking the proximal logprobs from each step's own forward instead
    would make every ratio 1 and the update differ."""
    torch.manual_seed(0)
    base = Bigram()
    with torch.no_grad():
        base.table.normal_()
    rollouts = [R([0, 1, 2, 3], [0, 1, 1, 1], [0.0] * 4), R([1, 4, 2], [0, 1, 1], [0.0] * 3)]
    ids, attn, _, _ = pad_batch(rollouts)
    with torch.no_grad():
        logp, _ = token_logprobs(base, ids, attn, with_entropy=False)
    for i, r in enumerate(rollouts):
        r.logprobs = [0.0] + logp[i, : len(r.token_ids) - 1].tolist()
    batch = TrainingBatch(rollouts=rollouts, advantages=[1.0, -1.0])
    cfg = LearnerConfig(lr=2.0, warmup_steps=0, grad_clip=1e6, mini_batches=2, epochs=2)
    plain, plain_model = sgd_update(batch, cfg, RLConfig(), copy.deepcopy(base))
    tis, tis_model = sgd_update(batch, cfg, RLConfig(tis_cap=2.0), copy.deepcopy(base))
    torch.testing.assert_close(tis_model.table, plain_model.table, atol=1e-6, rtol=0)
    assert plain["clip_fraction"] > 0  # later steps are off-policy enough to clip
    assert tis["clip_fraction"] == pytest.approx(plain["clip_fraction"], abs=1e-6)
    assert tis["tis_weight_mean"] == pytest.approx(1.0, abs=1e-6)


def engine_rollouts(engine_model: nn.Module, n: int = 6) -> TrainingBatch:
    """Rollouts sampled by the embedded engine: prompt tokens masked out, the sampled ones
    carrying the engine's logprobs."""
    core = EngineCore(engine_model, EngineConfig(kv_budget_tokens=2048))
    prompts = random_prompts(n, seed=3, low=3, high=8)
    outputs = core.generate(prompts, SamplingParams(max_tokens=12, seed=11))
    rollouts = [
        R(p + o.token_ids, [0] * len(p) + [1] * len(o.token_ids), [0.0] * len(p) + o.logprobs)
        for p, o in zip(prompts, outputs, strict=True)
    ]
    advantages = [(-1.0) ** i for i in range(n)]
    return TrainingBatch(rollouts=rollouts, advantages=advantages)


@pytest.mark.parametrize("mini_batches", [1, 3])
def test_engine_rollouts_from_the_learners_model_match_and_from_a_perturbed_copy_do_not(
    mini_batches: int,
) -> None:
    learner = tiny_qwen2(seed=0, dtype=torch.float32)
    perturbed = copy.deepcopy(learner)
    with torch.no_grad():
        perturbed.model.norm.weight.mul_(1.3)
    cfg = LearnerConfig(lr=1e-3, warmup_steps=0, micro_batch_size=4, mini_batches=mini_batches)
    figures = {}
    for name, engine_model in (("same", copy.deepcopy(learner)), ("perturbed", perturbed)):
        batch = engine_rollouts(engine_model)
        model = copy.deepcopy(learner).train()
        opt = make_optimizer(model, cfg)
        figures[name] = update_policy(
            model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig()
        )
    assert figures["same"]["logprob_mismatch_max"] < 1e-4, figures["same"]
    assert figures["perturbed"]["logprob_mismatch_mean"] > 0.05, figures["perturbed"]
    assert (
        figures["perturbed"]["logprob_mismatch_max"] > figures["perturbed"]["logprob_mismatch_mean"]
    )


def test_adamw_is_fused_only_when_every_parameter_is_on_a_gpu() -> None:
    from types import SimpleNamespace

    from rstar2.learner.policy_update import fused_adamw

    gpu, cpu = SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)
    assert fused_adamw([gpu, gpu]) is True
    assert fused_adamw([gpu, cpu]) is None
    assert fused_adamw([]) is None
    model = torch.nn.Linear(2, 2)
    assert make_optimizer(model, LearnerConfig()).defaults["fused"] is None


def test_an_update_with_a_nan_gradient_is_skipped_and_counted() -> None:
    """A non-finite gradient norm skips the optimizer step (the weights stay as they were and
    finite) and shows in `skipped_updates`; the next finite step applies again."""
    uniform = float(torch.log(torch.tensor(1 / 5)))
    rollouts = [R([0, 1, 2], [0, 1, 1], [0.0, uniform, uniform]), R([0, 3], [0, 1], [0.0, uniform])]
    batch = TrainingBatch(rollouts=rollouts, advantages=[1.0, -1.0])
    cfg = LearnerConfig(lr=0.1, warmup_steps=0, micro_batch_size=8)
    model = Bigram()
    poison = [True]
    model.table.register_hook(lambda g: g * float("nan") if poison[0] else g)
    opt = make_optimizer(model, cfg)
    schedule = make_lr_schedule(opt, cfg)
    metrics = update_policy(model, opt, schedule, batch, cfg, RLConfig())
    assert metrics["skipped_updates"] == 1.0 and metrics["grad_norm"] == 0.0
    assert torch.equal(model.table, torch.zeros(5, 5))
    poison[0] = False
    metrics = update_policy(model, opt, schedule, batch, cfg, RLConfig())
    assert metrics["skipped_updates"] == 0.0 and metrics["grad_norm"] > 0
    assert torch.isfinite(model.table).all() and not torch.equal(model.table, torch.zeros(5, 5))
