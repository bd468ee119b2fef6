"""The `--dry-run` plan: placement and per-GPU memory of a GPU deployment, without GPUs.

For a config with `cluster.gpus > 0` it prints where `rstar2 train` puts the actors and what
fits, planning only what train runs:

- engines = gpus / tp, one rollout worker each; one sandbox service per GPU node; reward and
  scheduler on node 0;
- the learner: `cluster.learner_ranks` ranks (FSDP2 when more than one), which rank 0 starts
  on its own node, rank r on that node's GPU r, or, with `cluster.learner_rendezvous`, which
  torchrun/srun start on as many nodes as they fill, one rank per GPU; either way on GPUs that
  also hold engines. With
  `cluster.colocate` the engines there sleep while the learner updates (vLLM sleep mode, not
  verified on a GPU); without it they keep their memory share the whole time;
- weights: bf16, 2 bytes/parameter, divided by tp on an engine;
- learner state, sharded over the learner's ranks: fp32 parameters, gradients and two Adam
  moments (16 B per parameter; bf16 is compute only), 16 P / learner_ranks per rank. It stays
  on the GPU during rollouts (the learner offloads nothing), so it must fit beside the engine's
  share (gpu_memory_utilization x GPU memory), colocated or not;
- KV pool per engine and KV bytes per token from the simulator's cost model
  (`sim.cost.kv_capacity_tokens`), so the plan and `rstar2 sim` agree on every KV figure;
- max-length trajectories per engine = KV pool // (prompt_tokens + max_response_tokens) with
  the longest stage's budget, against the rollouts each engine must serve per step.

What it does not do: check that a real cluster has these resources (it has none to look at),
or model activation memory of the learner (it depends on micro-batch and checkpointing).
"""

from __future__ import annotations

import math
from typing import Any

from rstar2.train.config import TrainConfig
from sim.cost import GPUS, MODELS, kv_capacity_tokens

GB = 1e9


def memory_plan(cfg: TrainConfig) -> dict[str, Any]:
    """The plan as data (what `print_plan` shows)."""
    c = cfg.cluster
    if c.gpus == 0:
        raise ValueError("cluster.gpus is 0: the dry-run plan is for GPU deployments")
    model, gpu = MODELS[c.model_preset], GPUS[c.gpu]
    engines = c.gpus // c.tp
    nodes = math.ceil(c.gpus / c.gpus_per_node)
    kv_tokens = kv_capacity_tokens(model, gpu, c.tp, c.gpu_memory_utilization)
    max_response = max(s.max_response_tokens or cfg.rollout.max_response_tokens for s in cfg.stages)
    traj_tokens = c.prompt_tokens + max_response
    rollouts = cfg.prompts_per_step * cfg.rollouts_per_prompt
    per_engine = math.ceil(rollouts / engines)
    fit = kv_tokens // traj_tokens
    learner_state = 16 * model.params / c.learner_ranks
    engine_share = gpu.memory_bytes * c.gpu_memory_utilization
    return {
        "nodes": nodes,
        "gpus": c.gpus,
        "gpu": gpu.name,
        "model": model.name,
        "params_b": model.params / 1e9,
        "tp": c.tp,
        "engines": engines,
        "sandbox_services": nodes,
        "learner_ranks": c.learner_ranks,
        "learner_rendezvous": c.learner_rendezvous,
        "gpus_per_node": c.gpus_per_node,
        "learner_on_cpu": cfg.learner.device == "cpu",
        "colocate": c.colocate,
        "engine_weights_gb": model.weight_bytes / c.tp / GB,
        "learner_state_gb_per_rank": learner_state / GB,
        "engine_share_gb": engine_share / GB,
        "gpu_memory_gb": gpu.memory_bytes / GB,
        "learner_gpu_fits": cfg.learner.device == "cpu"
        or engine_share + learner_state <= gpu.memory_bytes,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "kv_pool_tokens_per_engine": kv_tokens,
        "kv_pool_gb_per_engine": kv_tokens * model.kv_bytes_per_token / GB,
        "max_trajectory_tokens": traj_tokens,
        "max_length_trajectories_per_engine": fit,
        "rollouts_per_step": rollouts,
        "rollouts_per_engine": per_engine,
        "all_fit_at_max_length": fit >= per_engine,
    }


def format_plan(plan: dict[str, Any], cfg: TrainConfig) -> str:
    p = plan
    lines = [
        f"config valid: {cfg.total_steps} RL steps in {len(cfg.stages)} stage(s): "
        + ", ".join(f"{s.name} {s.steps} steps" for s in cfg.stages),
        f"placement: {p['nodes']} node(s) x {cfg.cluster.gpus_per_node} {p['gpu']} = "
        f"{p['gpus']} GPUs; {p['engines']} rollout engine(s) (tp={p['tp']}, backend "
        f"{cfg.cluster.engine_backend}); {p['sandbox_services']} sandbox service(s), one per "
        f"node; reward and scheduler on node 0",
        _learner_line(p),
        f"model: {p['model']} ({p['params_b']:.1f}B parameters)",
        f"  engine weights (bf16)          {p['engine_weights_gb']:8.1f} GB per engine",
        f"  learner state                  {p['learner_state_gb_per_rank']:8.1f} GB per learner "
        "rank (fp32 params, grads, Adam m and v)",
    ]
    if not p["learner_on_cpu"]:
        used = p["engine_share_gb"] + p["learner_state_gb_per_rank"]
        lines.append(
            f"  GPU with a learner rank        {used:8.1f} GB of {p['gpu_memory_gb']:.0f} GB "
            f"(engine share {p['engine_share_gb']:.1f} GB + learner state)"
        )
    lines += [
        f"  KV per token                   {p['kv_bytes_per_token'] / 1024:8.0f} KiB",
        f"  KV pool                        {p['kv_pool_tokens_per_engine']:8d} tokens per engine "
        f"({p['kv_pool_gb_per_engine']:.1f} GB)",
        f"  max-length trajectory          {p['max_trajectory_tokens']:8d} tokens "
        f"(prompt {cfg.cluster.prompt_tokens} + response budget)",
        f"  fit at max length              {p['max_length_trajectories_per_engine']:8d} per engine",
        f"  rollouts per step              {p['rollouts_per_step']:8d} "
        f"({p['rollouts_per_engine']} per engine)",
    ]
    if not p["learner_gpu_fits"]:
        lines.append(
            "  -> the learner state does not fit beside the engine's share: raise "
            "cluster.learner_ranks or lower cluster.gpu_memory_utilization"
        )
    if not p["all_fit_at_max_length"]:
        lines.append(
            "  -> not every rollout fits at max length at once: the kv_aware scheduler admits "
            "by free KV and queues the rest (see `rstar2 sim compare` for the makespan)"
        )
    return "\n".join(lines)


def _learner_line(p: dict[str, Any]) -> str:
    ranks = p["learner_ranks"]
    how = "1 rank" if ranks == 1 else f"{ranks} ranks (FSDP2)"
    if p["learner_on_cpu"]:
        return f"learner: {how} on node 0's CPU (learner.device = 'cpu')"
    if p["learner_rendezvous"]:
        nodes = math.ceil(ranks / p["gpus_per_node"])
        where = (
            f"on {nodes} node(s), one GPU each: rank 0 (the learner actor) on node 0's GPU 0, "
            f"ranks 1..{ranks - 1} started on the nodes by torchrun or srun (`rstar2 learner-rank`) "
            f"and met at {p['learner_rendezvous']},"
        )
    else:
        where = "on node 0, " + ("GPU 0," if ranks == 1 else f"GPUs 0..{ranks - 1},")
    if p["colocate"]:
        share = "colocated (vLLM sleep mode; not verified on GPU): the engines there sleep "
        share += "while the learner updates"
    else:
        share = "not colocated: the engines there keep their memory while the learner updates"
    return f"learner: {how} {where} {share}"


def dry_run_plan(cfg: TrainConfig) -> dict[str, Any]:
    """`--dry-run --json`: the validated config's shape, and the memory plan on GPUs."""
    out: dict[str, Any] = {
        "valid": True,
        "rl_steps": cfg.total_steps,
        "stages": [{"name": s.name, "steps": s.steps} for s in cfg.stages],
        "engines": cfg.graph.engines,
        "sandboxes": cfg.graph.sandboxes,
        "processes": cfg.graph.process_count(),
        "placement": _placement(cfg),
    }
    if cfg.cluster.gpus == 0:
        out["learner_device"] = cfg.learner.device
        out["engine_device"] = cfg.engine.device
    if cfg.cluster.gpus > 0:
        out["plan"] = memory_plan(cfg)
    return out


def _placement(cfg: TrainConfig) -> dict[str, str | list[str]]:
    """Each actor's process; with `graph.worker_processes` the rollout workers' one each."""
    where: dict[str, str | list[str]] = dict(cfg.graph.processes_of())
    if cfg.graph.worker_processes:
        where["rollout"] = cfg.graph.rollout_processes()
    return where


def _device(setting: str) -> str:
    """How a `learner.device` / `engine.device` setting reads in the plan."""
    return "a GPU if torch sees one, else the CPU" if setting == "auto" else setting


def print_plan(cfg: TrainConfig) -> None:
    if cfg.cluster.gpus == 0:
        ranks = cfg.cluster.learner_ranks
        print(
            f"config valid: embedded run, {cfg.total_steps} RL steps; SFT and the learner "
            f"({ranks} rank{'s, FSDP2' if ranks > 1 else ''}"
            f"{', bf16' if cfg.learner.bf16 else ''}) on {_device(cfg.learner.device)}; "
            f"{cfg.graph.engines} engine(s) on {_device(cfg.engine.device)}, "
            f"{cfg.graph.sandboxes} sandbox service(s), {cfg.graph.process_count()} process(es)"
        )
        return
    print(format_plan(memory_plan(cfg), cfg))
