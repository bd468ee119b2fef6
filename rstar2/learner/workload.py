"""Synthetic RL batches for `rstar2 bench learner`: what the learner is timed on.

- `fixed_batch`: `rollouts` sequences of exactly `tokens` tokens, the first quarter a masked
  prompt (the figure every earlier run of the benchmark used);
- `rl_batch`: sequences shaped like agentic RL rollouts (lengths drawn from a seeded
  distribution, at most `tokens`): a prompt of 1/16 to 1/8 of `tokens`, a response whose length
  is log-normal with median `tokens`/4 (a long tail up to the cap, as truncated rollouts make),
  cut into 1 to 4 model turns separated by masked tool responses of 1/64 to 1/16 of `tokens`;
- `trace_batch`: the lengths of a real run, from its `rollout_trace.jsonl` (one line per
  trajectory: `prompt_tokens` and `turns` of `model_tokens` / `tool_tokens`, see
  `rstar2.train.rollout_trace`), of one step (the last by default), repeated to `rollouts`.

Token ids are random (the update's cost does not depend on them), behaviour log-probs those of a
uniform policy, advantages alternate in sign, so every run does the same work.

What it does not do: produce rewards or anything a trained model would write.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch: imported where a batch is built (bench learner's flags need none)
    from rstar2.rl.resampling import TrainingBatch

WORKLOADS = ("fixed", "rl")


@dataclass
class SyntheticRollout:
    """One rollout of a benchmark batch (picklable: it travels to the other ranks)."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]


def _rollout(rng: random.Random, vocab: int, mask: list[int]) -> SyntheticRollout:
    ids = [rng.randrange(vocab) for _ in mask]
    uniform = -math.log(vocab)
    return SyntheticRollout(ids, mask, [uniform if m else 0.0 for m in mask])


def _batch(rollouts: list[SyntheticRollout]) -> TrainingBatch:
    from rstar2.rl.resampling import TrainingBatch

    advantages = [1.0 if i % 2 else -1.0 for i in range(len(rollouts))]
    return TrainingBatch(rollouts=rollouts, advantages=advantages)


def turn_mask(prompt: int, turns: list[tuple[int, int]]) -> list[int]:
    """The loss mask of a rollout: `prompt` masked tokens, then per turn its model tokens (1)
    and its tool-response tokens (0)."""
    mask = [0] * prompt
    for model, tool in turns:
        mask += [1] * model + [0] * tool
    return mask


def fixed_batch(vocab: int, rollouts: int, tokens: int, seed: int = 0) -> TrainingBatch:
    """`rollouts` sequences of `tokens` tokens, a masked prompt quarter."""
    rng = random.Random(seed)
    prompt = tokens // 4
    return _batch([_rollout(rng, vocab, turn_mask(prompt, [(tokens - prompt, 0)]))
                   for _ in range(rollouts)])  # fmt: skip


def rl_batch(vocab: int, rollouts: int, tokens: int, seed: int = 0) -> TrainingBatch:
    """`rollouts` sequences of at most `tokens` tokens shaped like agentic RL rollouts."""
    if tokens < 64:
        raise ValueError(f"the rl workload needs tokens >= 64, got {tokens}")
    rng = random.Random(seed)
    out = []
    for _ in range(rollouts):
        prompt = rng.randint(tokens // 16, tokens // 8)
        response = int(min(tokens - prompt, max(16, rng.lognormvariate(math.log(tokens / 4), 0.8))))
        n_turns = rng.randint(1, 4)
        tools = [rng.randint(tokens // 64, tokens // 16) for _ in range(n_turns - 1)]
        model_total = max(n_turns, response - sum(tools))
        while sum(tools) + model_total > response and tools:
            tools.pop()  # no room for this tool response: one turn fewer
        n_turns = len(tools) + 1
        cuts = sorted(rng.sample(range(1, model_total), n_turns - 1)) if n_turns > 1 else []
        models = [b - a for a, b in zip([0, *cuts], [*cuts, model_total], strict=True)]
        out.append(
            _rollout(rng, vocab, turn_mask(prompt, list(zip(models, [*tools, 0], strict=True))))
        )
    return _batch(out)


def trace_batch(
    path: Path, vocab: int, rollouts: int, step: int | None = None, seed: int = 0
) -> TrainingBatch:
    """The shapes of one step's trajectories in a `rollout_trace.jsonl` (the last step by
    default), cycled to `rollouts` sequences."""
    shapes = trace_shapes(path, step)
    rng = random.Random(seed)
    return _batch(
        [_rollout(rng, vocab, turn_mask(*shapes[i % len(shapes)])) for i in range(rollouts)]
    )


def trace_shapes(path: Path, step: int | None = None) -> list[tuple[int, list[tuple[int, int]]]]:
    """(prompt tokens, [(model tokens, tool tokens) per turn]) of each trajectory of one step
    of a `rollout_trace.jsonl` (the last by default). ValueError, KeyError or TypeError for a
    file that is not one."""
    lines = [json.loads(s) for s in Path(path).read_text().splitlines() if s.strip()]
    if not lines:
        raise ValueError(f"{path} holds no trajectories")
    chosen = step if step is not None else max(int(x.get("step", 0)) for x in lines)
    shapes = [
        (
            int(x["prompt_tokens"]),
            [(int(t["model_tokens"]), int(t["tool_tokens"])) for t in x["turns"]],
        )
        for x in lines
        if int(x.get("step", 0)) == chosen
    ]
    if not shapes:
        raise ValueError(f"{path} has no trajectories of step {chosen}")
    return shapes
