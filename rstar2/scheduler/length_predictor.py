"""The length predictor: the running mean response length of the trajectories finished so far.

The KV-aware policy's 'predicted' reservation needs a guess of how long a new trajectory will
grow before it has generated anything. The guess is the same for every trajectory (no
per-prompt model) and uses only what has finished so far, live and simulated alike:

    predicted_total = clamp(prompt + mean(finished responses), prompt + 1, max_total)

where a response is everything after the prompt (model and tool tokens). Before anything has
finished it predicts nothing (None: the policy reserves the maximum). A live scheduler keeps one
predictor for the whole run, so from the second RL step on it starts from the earlier steps'
mean; the simulator, which plays one step, starts it from a `prior` (the mean of an independent
draw of the same workload, what a live scheduler knows after one step) or cold.

What it does not do: look at the step being predicted (no oracle), or decide reservations
(`rstar2.scheduler.kv_aware` does).
"""

from __future__ import annotations


class LengthPredictor:
    """Running mean of finished response lengths, optionally started from a prior."""

    def __init__(self, prior_mean: float | None = None, prior_count: int = 0) -> None:
        if (prior_mean is None) != (prior_count == 0):
            raise ValueError("give prior_mean and prior_count >= 1 together, or neither")
        if prior_count < 0 or (prior_mean is not None and prior_mean < 0):
            raise ValueError(f"bad prior: mean {prior_mean!r}, count {prior_count}")
        self.count = prior_count
        self.total = 0.0 if prior_mean is None else prior_mean * prior_count

    def observe(self, response_tokens: int) -> None:
        """A trajectory finished with `response_tokens` tokens after its prompt."""
        if response_tokens < 0:
            raise ValueError(f"response_tokens must be >= 0, got {response_tokens}")
        self.total += response_tokens
        self.count += 1

    @property
    def mean(self) -> float | None:
        """Mean response length so far (None before the first)."""
        return self.total / self.count if self.count else None

    def predict(self, prompt_tokens: int, max_total_tokens: int) -> int | None:
        """Predicted final length of a trajectory with this prompt (see the module docstring)."""
        mean = self.mean
        if mean is None:
            return None
        return int(min(max(prompt_tokens + mean, prompt_tokens + 1), max_total_tokens))
