from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rstar2.config import ConfigError, from_dict, load_file
from rstar2.learner.sft import (
    MAX_SKIPPED_IN_A_ROW,
    SFTConfig,
    SFTDivergedError,
    collate,
    encode_examples,
    lr_at,
    masked_lm_loss,
    sft_threads,
    train_sft,
)
from rstar2.model.tiny import build_model, tokenizer_corpus
from rstar2.model.tiny_config import TinyModelConfig
from rstar2.model.tokenizer import special_token_ids, train_tokenizer
from rstar2.tasks import TaskConfig, build_traces, generate_problems

SMALL = TinyModelConfig(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=32,
    corpus_problems=100,
)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(tokenizer_corpus(SMALL), SMALL.vocab_size)


@pytest.fixture(scope="module")
def examples(tok):
    problems = generate_problems(TaskConfig(train_size=8), "train")
    return encode_examples(tok, build_traces(problems, mistake_fraction=0.5))


def test_lr_schedule_exact_values() -> None:
    cfg = SFTConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(110, cfg) == pytest.approx(0.1)


def test_collate_pads_right_with_zero_masks() -> None:
    ids, attn, loss = collate([([1, 2, 3], [0, 1, 1]), ([4], [1])], pad_id=9)
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9]]
    assert attn.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert loss.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    with pytest.raises(ValueError):
        collate([([1, 2], [1])], pad_id=0)
    with pytest.raises(ValueError):
        collate([], pad_id=0)


class Fixed(torch.nn.Module):
    """A 'model' whose logits are a fixed table, so the loss can be computed by hand."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):  # noqa: ARG002
        return type("Out", (), {"logits": self.logits})()


def test_masked_loss_counts_only_mask_one_targets() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]]))
    ids = torch.tensor([[0, 1, 0]])
    attn = torch.ones_like(ids)
    # target at position 1 is ids[1]=1 (p=0.5), at position 2 is ids[2]=0 (p=0.25)
    only_last = masked_lm_loss(Fixed(logits), ids, attn, torch.tensor([[0.0, 0.0, 1.0]]))
    assert only_last.item() == pytest.approx(-math.log(0.25))
    both = masked_lm_loss(Fixed(logits), ids, attn, torch.tensor([[0.0, 1.0, 1.0]]))
    assert both.item() == pytest.approx((-math.log(0.5) - math.log(0.25)) / 2)


def test_examples_mask_assistant_tokens_only(tok, examples) -> None:
    ids, mask = examples[0]
    learned = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert learned.startswith(("Let me", "I will")) and learned.endswith("</answer><|im_end|>")
    assert "Tool call" not in learned and "<|im_start|>" not in learned


def _run(tok, examples, steps: int, seed: int = 0) -> tuple[torch.nn.Module, list[float]]:
    torch.manual_seed(0)
    model = build_model(SMALL, tok)
    cfg = SFTConfig(steps=steps, batch_size=4, lr=1e-2, warmup_steps=2, seed=seed, log_every=5)
    result = train_sft(model, examples, cfg, special_token_ids(tok).eos)
    assert len(result.losses) == steps and result.tokens > 0
    return model, result.losses


@pytest.mark.slow
def test_training_lowers_the_loss(tok, examples) -> None:
    _, losses = _run(tok, examples, steps=30)
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5


def test_same_seed_same_weights(tok, examples) -> None:
    a, la = _run(tok, examples, steps=4)
    b, lb = _run(tok, examples, steps=4)
    c, lc = _run(tok, examples, steps=4, seed=1)
    assert la == lb and la != lc
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_on_step_is_called_after_every_step(tok, examples) -> None:
    seen: list[int] = []
    model = build_model(SMALL, tok)
    train_sft(model, examples, SFTConfig(steps=3, batch_size=2), 0, on_step=seen.append)
    assert seen == [1, 2, 3]


def _nan_gradients_at(model: torch.nn.Module, calls: set[int]) -> None:
    """Make the gradient of the model's first parameter NaN in the given (1-based) backward
    passes, the loss staying finite (what SFT met on an H200: a NaN gradient norm after a
    finite loss)."""
    seen = [0]

    def hook(grad: torch.Tensor) -> torch.Tensor:
        seen[0] += 1
        return grad * float("nan") if seen[0] in calls else grad

    next(model.parameters()).register_hook(hook)


def test_a_step_with_a_nan_gradient_is_skipped_not_applied(tok, examples) -> None:
    torch.manual_seed(0)
    model = build_model(SMALL, tok)
    _nan_gradients_at(model, {2})
    cfg = SFTConfig(steps=4, batch_size=2, lr=1e-2, warmup_steps=1)
    result = train_sft(model, examples, cfg, 0)
    assert [step for step, _, _ in result.skipped] == [2]
    assert math.isnan(result.skipped[0][2]) and math.isfinite(result.skipped[0][1])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(math.isfinite(x) for x in result.losses)


def test_sft_that_keeps_producing_nan_stops_with_a_clear_error(tok, examples) -> None:
    model = build_model(SMALL, tok)
    _nan_gradients_at(model, set(range(3, 100)))
    cfg = SFTConfig(steps=MAX_SKIPPED_IN_A_ROW + 5, batch_size=2)
    with pytest.raises(SFTDivergedError, match="diverged: 10 steps in a row"):
        train_sft(model, examples, cfg, 0)


def test_bf16_autocasts_the_forward_and_keeps_float32_weights(tok, examples) -> None:
    """`bf16=True` (`learner.bf16` in `rstar2 train`) computes the loss in bf16: the first loss
    differs from float32's by bf16 rounding, and the weights and optimizer stay float32."""
    cfg = SFTConfig(steps=2, batch_size=4, lr=1e-2, warmup_steps=1)
    first = []
    for bf16 in (False, True):
        torch.manual_seed(0)
        model = build_model(SMALL, tok)
        result = train_sft(model, examples, cfg, 0, bf16=bf16)
        first.append(result.losses[0])
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert first[0] != first[1]
    assert first[1] == pytest.approx(first[0], rel=0.05)


@pytest.mark.parametrize(
    ("key", "value"), [("steps", -1), ("lr", 0.0), ("betas", (0.9, 1.0)), ("threads", -1)]
)
def test_config_validation(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        SFTConfig(**{key: value}).validate()  # type: ignore[arg-type]


def test_sft_takes_every_core_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 7)
    assert sft_threads(SFTConfig()) == 7
    assert sft_threads(SFTConfig(threads=3)) == 3


def test_train_rejects_empty_data(tok) -> None:
    with pytest.raises(ValueError):
        train_sft(build_model(SMALL, tok), [], SFTConfig(steps=1), 0)


def test_shipped_config_spells_out_the_defaults() -> None:
    data = load_file(Path(__file__).parents[2] / "configs" / "tiny_default.toml")
    assert from_dict(SFTConfig, data["sft"]) == SFTConfig()
    assert from_dict(TinyModelConfig, data["model"]) == TinyModelConfig()
    assert from_dict(TaskConfig, data["task"]) == TaskConfig()
