"""A vLLM worker extension: load new policy weights from a safetensors file.

vLLM mixes this class into each of its GPU/CPU workers (engine argument
`worker_extension_cls="rstar2.engine.vllm_worker:WeightFileLoader"`), so
`AsyncLLM.collective_rpc("load_weights_from_file", args=(path,))` runs it in every worker
process. The file is how weights cross the process boundary on one host: tensors passed as RPC
arguments are not preserved by vLLM's serialisation, a path is.

What it does not do: write the file (the backend does), reset the prefix cache (the engine core
owns it; the backend calls `reset_prefix_cache` afterwards), or move weights between hosts
(GPU clusters broadcast with vLLM's NCCL weight-transfer engine instead; docs/production.md).

Imported only inside vLLM's worker processes, where vLLM and safetensors exist.
"""

from __future__ import annotations

import logging

from safetensors.torch import load_file

log = logging.getLogger(__name__)


class WeightFileLoader:
    """Methods vLLM adds to its worker class; `self` is the worker."""

    def load_weights_from_file(self, path: str) -> int:
        """Load every tensor of the safetensors file at `path` (HF names); returns the count.

        Goes through vLLM's in-place reload (`Worker.reload_weights`), which undoes and redoes
        the kernel-format processing some backends apply after loading (the CPU backend repacks
        linear weights, leaving the original parameters empty); `model.load_weights` alone
        would fail there.
        """
        weights = load_file(path, device="cpu")
        self.reload_weights(  # type: ignore[attr-defined]  # provided by vLLM's worker
            weights_iterator=iter(weights.items()), is_checkpoint_format=True
        )
        log.info("reloaded %d tensors from %s", len(weights), path)
        return len(weights)
