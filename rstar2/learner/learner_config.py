"""The learner's optimisation settings (`LearnerConfig`), validated on load.

What it does not do: use them (`policy_update.py` runs the update, `model_preparation.py`
readies the model, `micro_batch.py` sizes and runs the micro-batches).
"""

from __future__ import annotations

from dataclasses import dataclass

from rstar2.config import require

CHECKPOINT_POLICIES = ("full", "selective")
"""The values of `learner.checkpoint_policy` (`activation_checkpoint.py` says what each keeps)."""
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes (`learner.compile_mode`)."""


@dataclass
class LearnerConfig:
    """Optimisation settings of the RL learner."""

    lr: float = 1e-6
    """Peak learning rate (paper: constant 1e-6 after warm-up)."""
    warmup_steps: int = 20
    """Linear warm-up over this many RL steps (paper: 20), then constant."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value."""
    micro_batch_size: int = 16
    """At most this many sequences per forward/backward pass (gradient accumulation inside a
    mini-batch)."""
    micro_batch_tokens: int = 16384
    """At most this many tokens per forward/backward pass (a longer sequence is a micro-batch of
    its own); 0: micro-batches of `micro_batch_size` sequences only, split evenly."""
    packed: bool = True
    """Hugging Face models: each micro-batch's sequences packed into one row without padding
    (attention kept within each sequence) and log-probs computed by the chunked LM head, only
    at loss positions (`packing`, `logprob_head`). False: padded rows and full logits (the
    reference computation). Other models always take the padded path."""
    head_chunk: int = 1024
    """Positions per chunk of the chunked LM head (its memory: a few chunk x vocab buffers)."""
    compile_head: bool | None = None
    """torch.compile the chunked LM head's element-wise work (forward: log-sum-exp, the sampled
    token's log-prob, the entropy; backward: the logits' gradient), the matmuls left to cuBLAS;
    the first update pays the compilation. None: on when the learner computes on a GPU
    (measured on an H200 at Qwen2.5-0.5B shape: the head 0.195 -> 0.074 s of the update,
    +39% tokens/s, docs/production.md), off on the CPU."""
    mini_batches: int = 1
    """Optimizer steps per pass: the batch is split into this many mini-batches."""
    epochs: int = 1
    """Passes over the step's batch (PPO epochs; the paper: 1, each rollout used once). More
    passes reuse the rollouts for further, increasingly off-policy optimizer steps (the clip
    range bounds them) and multiply the update's work by `epochs`, which also makes it a
    what-if knob: `rstar2 profile --set learner.epochs=N` shows the step with an N times
    heavier policy update."""
    bf16: bool = False
    """bf16 compute with fp32 master weights and optimizer state: FSDP2's mixed-precision policy
    when the learner is sharded on GPUs, bf16 autocast of the forward pass otherwise."""
    device: str = "auto"
    """Where the learner computes: "auto" (a GPU when torch sees one, else the CPU), "cpu" or
    "cuda" (ROCm GPUs are "cuda" in torch). Rank r of a sharded learner takes its local GPU."""
    activation_checkpointing: bool = False
    """Recompute decoder layers' activations in backward instead of keeping them (less
    memory, about one more forward of compute): `torch.utils.checkpoint` around each decoder
    layer's forward (`activation_checkpoint.py`)."""
    checkpoint_policy: str = "full"
    """With activation checkpointing, what a checkpointed layer keeps (`activation_checkpoint.py`):
    "full", only its input (the whole layer recomputed in backward: the least memory);
    "selective", also the outputs of its matmuls and attention (only element-wise work
    recomputed: nearly the plain update's speed, more memory than "full")."""
    checkpoint_every: int = 1
    """With activation checkpointing: checkpoint every k-th decoder layer (layers 0, k, 2k, ...;
    1: all), trading memory for the recomputation's time."""
    reshard_after_forward: bool | None = None
    """FSDP2: free the gathered parameters after forward and gather them again for backward.
    None: only with several ranks (one rank frees nothing another could use)."""
    sync_every_micro_batch: bool | None = None
    """FSDP2: reduce the gradients (and reshard the parameters) after every micro-batch's
    backward. None: only with several ranks, where it keeps each rank's gradients sharded
    (ZeRO's memory saving); with one rank the gradients accumulate in place and are reduced
    once, after a mini-batch's last micro-batch (`set_requires_gradient_sync`), which saves the
    per-layer reduce and regather of every other micro-batch. False with several ranks: the
    same, at the cost of a full fp32 gradient on every rank."""
    shard_per_layer: bool | None = None
    """FSDP2: wrap each decoder layer as a unit of its own (gathered, resharded and reduced
    layer by layer, with hooks around every layer's forward and backward), then the rest of
    the model. None: only with several ranks, where per-layer units bound the memory of the
    gathered parameters and overlap communication with compute; one rank wraps the whole model
    as one unit (it holds every parameter anyway, and has nothing to communicate): one gather
    and one reduction a mini-batch, no per-layer hooks."""
    compile: bool | None = None
    """torch.compile each decoder layer (in place: module names unchanged), before FSDP2 wraps
    it; the first update pays the compilation (about 20 s at Qwen2.5-0.5B shape). None: on
    when the learner computes on a GPU (measured on an H200: +25% tokens/s at 0.5B, +34% at
    1.5B, docs/production.md), off on the CPU."""
    compile_mode: str = "default"
    """torch.compile's mode for the decoder layers (`compile`): "default", or
    "reduce-overhead" (CUDA graphs: each compiled layer's kernels replayed as one launch, which
    pays where the update is bound by the host's launches, as the 0.5B update is on an H200;
    docs/production.md), "max-autotune" or "max-autotune-no-cudagraphs". CUDA graphs replay
    fixed shapes, so "reduce-overhead" is for now a measurement setting (`bench learner`'s fixed
    workload, whose micro-batches are one shape): in an RL run each micro-batch's own length,
    sequence count and longest sequence record new graphs, which costs more than it saves;
    padding micro-batches to one shape is not built."""

    def validate(self) -> None:
        require(self.lr > 0, "learner.lr", self.lr, "a positive number")
        require(self.warmup_steps >= 0, "learner.warmup_steps", self.warmup_steps, ">= 0")
        require(self.weight_decay >= 0, "learner.weight_decay", self.weight_decay, ">= 0")
        require(self.grad_clip > 0, "learner.grad_clip", self.grad_clip, "a positive number")
        require(
            self.micro_batch_size >= 1, "learner.micro_batch_size", self.micro_batch_size, ">= 1"
        )
        require(self.mini_batches >= 1, "learner.mini_batches", self.mini_batches, ">= 1")
        require(self.epochs >= 1, "learner.epochs", self.epochs, "an integer >= 1")
        require(
            self.micro_batch_tokens >= 0,
            "learner.micro_batch_tokens",
            self.micro_batch_tokens,
            ">= 0 (0: no token budget)",
        )
        require(self.head_chunk >= 1, "learner.head_chunk", self.head_chunk, ">= 1")
        require(
            self.checkpoint_every >= 1, "learner.checkpoint_every", self.checkpoint_every, ">= 1"
        )
        for key, value, default in (
            ("checkpoint_policy", self.checkpoint_policy, "full"),
            ("checkpoint_every", self.checkpoint_every, 1),
        ):
            require(
                value == default or self.activation_checkpointing,
                f"learner.{key}",
                value,
                f"{default!r} unless learner.activation_checkpointing = true (it has no "
                "effect without it)",
            )
        require(
            self.checkpoint_policy in CHECKPOINT_POLICIES,
            "learner.checkpoint_policy",
            self.checkpoint_policy,
            " or ".join(f'"{p}"' for p in CHECKPOINT_POLICIES),
        )
        require(
            self.compile_mode in COMPILE_MODES,
            "learner.compile_mode",
            self.compile_mode,
            " or ".join(f'"{m}"' for m in COMPILE_MODES),
        )
        require(
            self.compile_mode == "default" or self.compile is not False,
            "learner.compile_mode",
            self.compile_mode,
            '"default" when learner.compile = false (it has no effect without it)',
        )
        require(
            self.device in ("auto", "cpu", "cuda"),
            "learner.device",
            self.device,
            '"auto", "cpu" or "cuda"',
        )
