"""Stage-0 SFT's settings (`SFTConfig`), apart from the training code in `rstar2.learner.sft`.

Kept apart so that a training config (`rstar2.train.config`) reads, checks and prints without
importing torch: `rstar2 train --help` and a mistyped `--set` answer at once.

What it does not do: train (`rstar2.learner.sft`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rstar2.config import require


@dataclass
class SFTConfig:
    """Stage-0 SFT settings (defaults: the embedded default's budget on 2 CPU cores)."""

    steps: int = 1000
    """Optimizer steps."""
    batch_size: int = 16
    """Traces per step."""
    lr: float = 5e-3
    """Peak learning rate (after warm-up)."""
    min_lr_ratio: float = 0.1
    """Cosine decay ends at lr * min_lr_ratio."""
    warmup_steps: int = 30
    """Linear warm-up steps from 0 to lr."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value."""
    seed: int = 0
    """Seed of batch order and of any torch randomness (dropout, if the model has it)."""
    log_every: int = 25
    """Log a progress line every this many steps."""
    mistake_fraction: float = 0.15
    """Share of SFT traces whose first tool call fails and is then fixed."""
    train_problems: int = 4000
    """Traces are built from the first this many problems of the task's train split."""
    threads: int = 0
    """torch threads of SFT on the CPU (0 = every core: SFT runs alone, before the actor graph
    starts; 2 threads measured 0.44 s/step on the default against 1 thread's 0.64 s)."""

    def validate(self) -> None:
        require(self.steps >= 0, "steps", self.steps, "an integer >= 0 (0 skips SFT)")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "a positive integer")
        require(self.lr > 0, "lr", self.lr, "a positive number")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio, "0..1")
        require(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, ">= 0")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        require(all(0 <= b < 1 for b in self.betas), "betas", self.betas, "two numbers in [0, 1)")
        require(self.grad_clip > 0, "grad_clip", self.grad_clip, "a positive number")
        require(self.log_every >= 1, "log_every", self.log_every, "a positive integer")
        require(0 <= self.mistake_fraction <= 1, "mistake_fraction", self.mistake_fraction, "0..1")
        require(self.train_problems >= 1, "train_problems", self.train_problems, ">= 1")
        require(self.threads >= 0, "threads", self.threads, "an integer >= 0 (0: every core)")
