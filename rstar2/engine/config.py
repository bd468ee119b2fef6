"""Configuration of the embedded engine (one dataclass, validated on load), and the device
its `device` setting resolves to on the machine that runs it (`resolve_device`).

What it does not do: choose the model (callers pass a module or a directory) or configure
other backends (a vLLM backend has its own settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rstar2 import devices
from rstar2.config import require
from rstar2.devices import DEVICES

if TYPE_CHECKING:
    import torch

DECODE_PATHS = ("auto", "fixed", "dynamic")


@dataclass
class EngineConfig:
    kv_budget_tokens: int = 65536
    """KV cache capacity in tokens (rounded down to whole blocks); all running requests share it."""
    block_size: int = 16
    """Tokens per KV block: the unit of allocation, preemption accounting and `stats()`."""
    max_num_seqs: int = 256
    """Most requests in the running batch at once."""
    max_num_batched_tokens: int = 4096
    """Most tokens (prefill + decode) in one engine step; a longer prompt is prefilled alone."""
    max_model_len: int = 0
    """Longest prompt + output in tokens; 0 = the model's max_position_embeddings."""
    prefix_cache_entries: int = 256
    """Finished requests whose KV blocks are kept for a continuation (multi-turn prefix reuse);
    they are evicted, oldest first, whenever blocks are needed. 0 disables reuse."""
    num_threads: int = 0
    """torch intra-op threads for the engine; 0 = leave torch's setting alone."""
    device: str = "auto"
    """Where the model, the KV cache and the sampling tensors live: "cpu", "cuda" (fails at
    engine start on a machine where torch sees no GPU; ROCm builds count as "cuda") or "auto"
    (cuda when torch sees a GPU, else cpu). Resolved where the engine starts (`resolve_device`),
    not where the config is read."""
    decode: str = "auto"
    """How decode steps run: "dynamic" (one forward over the step's tokens, attention per
    length bucket: the CPU's fastest), "fixed" (one-token requests padded to fixed shapes,
    sampled on the device, captured as CUDA graphs on a GPU: `decode_graphs.py`) or "auto"
    (fixed on a GPU, dynamic elsewhere). The two sample differently: "fixed" draws from a
    counter-based hash of (seed, token index), "dynamic" from per-request generators."""
    cuda_graphs: bool = True
    """With fixed decode on a GPU: capture each shape as a CUDA graph (false: run the same
    fixed-shape code eagerly, to tell the graphs' gain from the rest)."""
    decode_steps: int = 1
    """With fixed decode: decode steps per round (vLLM's multi-step scheduling). When a step
    has only one-token decodes, the engine runs up to this many steps on the device, each
    taking the previous step's tokens from the device, and the host schedules, fills the
    buffers and reads the tokens once per round (`decode_graphs.FixedDecoder.decode_round`).
    The outputs are the same as with 1; a request that finishes inside a round is known at
    the round's end, and newcomers are admitted every other step (they wait at most one
    round). 1: every step."""
    prefill_graph_tokens: int = 0
    """With fixed decode: prefills of 2 to this many new tokens (in multi-turn RL, the new
    turns after tool responses; short prompts too) also run through fixed-shape buffers,
    captured as CUDA graphs on a GPU (`prefill_graphs.py`), instead of the dynamic forward,
    bound by Python on a GPU. The same outputs. 0: every prefill takes the dynamic forward."""
    instant_tool_calls: int = 1
    """With `cluster.engine_backend = "instant"` (no model, `rstar2.rollout.instant_engine`):
    the turns of each rollout that end in a tool call before its answer."""
    instant_turn_tokens: int = 28
    """With `cluster.engine_backend = "instant"`: the tokens of each scripted turn (never
    fewer than its call or answer: 28 and 8 tokens in the tests' tool policy's tokenizer)."""

    def validate(self) -> None:
        require(
            self.kv_budget_tokens >= self.block_size,
            "kv_budget_tokens",
            self.kv_budget_tokens,
            f"at least one block ({self.block_size} tokens)",
        )
        require(self.block_size >= 1, "block_size", self.block_size, "an integer >= 1")
        require(self.max_num_seqs >= 1, "max_num_seqs", self.max_num_seqs, "an integer >= 1")
        require(
            self.max_num_batched_tokens >= 1,
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            "an integer >= 1",
        )
        require(
            self.max_model_len >= 0,
            "max_model_len",
            self.max_model_len,
            "0 (model default) or a positive integer",
        )
        require(
            self.prefix_cache_entries >= 0,
            "prefix_cache_entries",
            self.prefix_cache_entries,
            "an integer >= 0",
        )
        require(self.num_threads >= 0, "num_threads", self.num_threads, "an integer >= 0")
        require(self.device in DEVICES, "device", self.device, " or ".join(map(repr, DEVICES)))
        require(
            self.decode in DECODE_PATHS,
            "decode",
            self.decode,
            " or ".join(map(repr, DECODE_PATHS)),
        )
        require(self.decode_steps >= 1, "decode_steps", self.decode_steps, "an integer >= 1")
        require(
            self.decode_steps == 1 or self.decode != "dynamic",
            "decode_steps",
            self.decode_steps,
            '1 with decode = "dynamic" (rounds of several steps need the fixed path)',
        )
        require(
            self.prefill_graph_tokens == 0 or self.prefill_graph_tokens >= 2,
            "prefill_graph_tokens",
            self.prefill_graph_tokens,
            "0 (off) or an integer >= 2",
        )
        require(
            self.prefill_graph_tokens == 0 or self.decode != "dynamic",
            "prefill_graph_tokens",
            self.prefill_graph_tokens,
            '0 with decode = "dynamic" (fixed-shape prefills need the fixed path)',
        )
        require(
            self.instant_tool_calls >= 0,
            "instant_tool_calls",
            self.instant_tool_calls,
            "an integer >= 0",
        )
        require(
            self.instant_turn_tokens >= 1,
            "instant_turn_tokens",
            self.instant_turn_tokens,
            "an integer >= 1",
        )

    def fixed_decode(self, device: torch.device) -> bool:
        """Whether decode steps take the fixed-shape path on `device`."""
        return self.decode == "fixed" or (self.decode == "auto" and device.type == "cuda")

    def round_steps(self, device: torch.device) -> int:
        """Decode steps per round on `device`: `decode_steps` on the fixed path, else 1."""
        return self.decode_steps if self.fixed_decode(device) else 1

    def prefill_tokens(self, device: torch.device) -> int:
        """The most new tokens of a fixed-shape prefill on `device` (0: none)."""
        return self.prefill_graph_tokens if self.fixed_decode(device) else 0

    @property
    def num_blocks(self) -> int:
        return self.kv_budget_tokens // self.block_size


def resolve_device(setting: str, index: int = 0, cuda_devices: int | None = None) -> torch.device:
    """The device `engine.device = setting` means for engine number `index` of its host (with
    GPUs, engines of one host spread over them; see `rstar2.devices`)."""
    return devices.resolve_device(setting, "engine.device", index, cuda_devices)
