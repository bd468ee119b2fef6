"""A learner's model readied for the policy update, in place, before FSDP2 wraps it.

`prepare_model` installs the chunked LM head and packed attention (when the model supports
both and `learner.packed`), activation checkpointing (`activation_checkpoint.py`) and compiled
decoder layers;
`packed_head` says whether a model was readied for packed micro-batches.

What it does not do: load or shard the model (`rstar2.model.loader`, `distributed.py`) or run
the update (`policy_update.py`).
"""

from __future__ import annotations

import torch
from torch import nn

from rstar2.learner.activation_checkpoint import checkpoint_layers
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.logprob_head import LogprobHead
from rstar2.learner.logprob_head import install as install_head
from rstar2.learner.packing import PACKED_ATTENTION, use_packed_attention


def prepare_model(model: nn.Module, cfg: LearnerConfig) -> nn.Module:
    """Ready a learner's model for `update_policy` (in place, before FSDP2 wraps it): the
    chunked LM head and packed attention when `cfg.packed` and the model supports both,
    activation checkpointing of every `cfg.checkpoint_every`-th decoder layer (keeping what
    `cfg.checkpoint_policy` says), and compiled
    decoder layers with `cfg.compile` (by default on a GPU: call after moving the model; in
    torch.compile's `cfg.compile_mode`); the
    head's element-wise work compiled with `cfg.compile_head` (by default on a GPU too)."""
    on_gpu = next(iter(model.parameters()), torch.empty(0)).is_cuda
    compile_head = on_gpu if cfg.compile_head is None else cfg.compile_head
    if (
        cfg.packed
        and hasattr(model, "config")
        and install_head(model, cfg.head_chunk, compile_head)
    ):
        use_packed_attention(model)
    layers = getattr(getattr(model, "model", None), "layers", None)
    compile_layers = on_gpu if cfg.compile is None else cfg.compile
    for key, on in (("activation_checkpointing", cfg.activation_checkpointing),
                    ("compile", compile_layers)):  # fmt: skip
        if on and not isinstance(layers, nn.ModuleList):
            raise TypeError(
                f"learner.{key} needs decoder layers at model.model.layers, "
                f"{type(model).__name__} has none"
            )
    if cfg.activation_checkpointing:
        checkpoint_layers(layers, cfg.checkpoint_every, cfg.checkpoint_policy)
    if compile_layers:
        options = {} if cfg.compile_mode == "default" else {"mode": cfg.compile_mode}
        for layer in layers:
            layer.compile(**options)
    return model


def packed_head(model: nn.Module) -> LogprobHead | None:
    """The model's chunked LM head when it is ready for packed rows (`prepare_model`)."""
    head = getattr(model, "lm_head", None)
    config = getattr(model, "config", None)
    if isinstance(head, LogprobHead) and getattr(config, "_attn_implementation", None) == (
        PACKED_ATTENTION
    ):
        return head
    return None
