"""Configuration of the RL algorithm: down-sampling (RoC or plain GRPO), advantages, loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rstar2.config import require


@dataclass
class RLConfig:
    algo: Literal["roc", "grpo"] = "roc"
    """"roc": Resample-on-Correct down-sampling of each prompt's rollouts to `group_size`;
    "grpo": plain GRPO (no penalty-based selection), for ablations."""

    roc_variant: Literal["sampled", "lowest_penalty"] = "sampled"
    """"sampled": the paper's RoC (negatives uniformly at random, positives drawn without
    replacement with probability proportional to 1/(penalty + penalty_eps)); "lowest_penalty":
    the released code's deterministic variant (the lowest-penalty rollouts of each kind)."""

    group_size: int = 16
    """G: rollouts kept per prompt (the rollout actor samples 2G for RoC)."""

    grpo_keep: Literal["first", "all"] = "all"
    """Plain GRPO: keep the first `group_size` rollouts of a prompt, or all of them."""

    min_each: int = 2
    """RoC keeps at least this many positives and negatives when the group has them (the
    released code's rule; capped at group_size // 2). 0 gives the paper's plain halves."""

    penalty_eps: float = 0.01
    """Added to the penalty before inverting it, so a flawless positive (penalty 0) gets a large
    but finite weight: 1/0.01 = 100 against 1/(0.1 + 0.01) ~ 9 for 10% tool errors."""

    error_penalty: bool = True
    """Include p_err (share of failed tool calls) in the RoC penalty."""

    format_penalty: bool = True
    """Include p_format (missing or repeated <answer> tags) in the RoC penalty."""

    infra_max_share: float = 0.5
    """A prompt whose rollouts were hit by infrastructure failures (`infra_failure`, never
    trained on) in more than this share is dropped whole; below it, its advantages are taken
    over the rest (`build_training_batch`). 1.0: never drop a group for that."""

    adv_eps: float = 1e-6
    """Added to the group's standard deviation in A = (r - mean) / (std + adv_eps)."""

    eps_low: float = 0.2
    """Lower clip range: ratios below 1 - eps_low stop contributing gradient."""

    eps_high: float = 0.28
    """Upper clip range (clip-higher): ratios above 1 + eps_high stop contributing gradient."""

    kl_coef: float = 0.0
    """Weight of the k3 KL penalty against the reference policy (0 = off, as in the paper)."""

    entropy_coef: float = 0.0
    """Weight of the entropy bonus (0 = off, as in the paper)."""

    tis_cap: float | None = None
    """Truncated importance sampling against the engine (0 or unset = off, the paper's loss).
    When set (C >= 1; peers use about 2), the clip ratio is taken against the learner's own
    logprobs before the step's update (the "proximal" policy) instead of the engine's, and each
    token's surrogate is weighted by min(exp(lp_learner - lp_engine), C), correcting for the
    engine sampling from slightly different probabilities than the learner computes (kernels,
    precision, batching: the `logprob_mismatch_*` metrics). Costs a no-grad forward pass over
    the batch when the step takes several optimizer steps (`learner.mini_batches` or
    `learner.epochs` > 1); free otherwise."""

    max_staleness: int = 0
    """Asynchronous RL: how many policy versions a trajectory's oldest token may lag the
    learner (k). 0 is the paper's synchronous loop: step t's rollouts start only after update
    t-1 has reached the engines. k > 0 lets the rollouts of steps t+1..t+k generate while the
    learner updates on step t (weights reach the engines mid-trajectory, at turn boundaries),
    and the loss takes the decoupled form: clipped against the learner's own logprobs before
    the update (proximal), weighted by min(exp(proximal - behaviour), tis_cap) against the
    engine's recorded ones (behaviour; untruncated without `tis_cap`). See docs/async.md."""

    @property
    def decoupled(self) -> bool:
        """Whether the clip is taken against the learner's proximal logprobs rather than the
        engine's (TIS on, or asynchronous RL)."""
        return self.tis or self.max_staleness > 0

    @property
    def tis(self) -> bool:
        """Whether truncated importance sampling is on (`tis_cap` set and nonzero)."""
        return bool(self.tis_cap)

    def validate(self) -> None:
        require(self.group_size >= 2, "rl.group_size", self.group_size, "an integer >= 2")
        require(self.min_each >= 0, "rl.min_each", self.min_each, "an integer >= 0")
        require(self.penalty_eps > 0, "rl.penalty_eps", self.penalty_eps, "a number > 0")
        require(self.adv_eps > 0, "rl.adv_eps", self.adv_eps, "a number > 0")
        require(
            0 <= self.infra_max_share <= 1,
            "rl.infra_max_share",
            self.infra_max_share,
            "a number in [0, 1]",
        )
        require(0 < self.eps_low < 1, "rl.eps_low", self.eps_low, "a number in (0, 1)")
        require(self.eps_high > 0, "rl.eps_high", self.eps_high, "a number > 0")
        require(self.kl_coef >= 0, "rl.kl_coef", self.kl_coef, "a number >= 0")
        require(self.entropy_coef >= 0, "rl.entropy_coef", self.entropy_coef, "a number >= 0")
        require(
            isinstance(self.max_staleness, int) and self.max_staleness >= 0,
            "rl.max_staleness",
            self.max_staleness,
            "an integer >= 0 (0: synchronous)",
        )
        require(
            self.tis_cap is None or self.tis_cap == 0 or self.tis_cap >= 1,
            "rl.tis_cap",
            self.tis_cap,
            "a number >= 1, or 0 / unset for off",
        )
