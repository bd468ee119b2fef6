"""`TrainConfig`: everything one training run needs, one table per component.

The embedded default lives in `rstar2/configs/tiny.toml` (a CPU-sized run); `configs/` at the
repository root holds the paper's full-scale setup. `load_train_config(path, quick, sets)`
starts from the dataclass defaults, applies the file, then the `--quick` preset, then
`--set key=value` overrides, and validates the result (errors name the dotted key).

The GPU deployment's table (`[cluster]`, `ClusterConfig`) is in `cluster_config.py`.

What it does not do: run anything (see `runner.py`).
"""

from __future__ import annotations

import copy
import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from rstar2.actors.graph_config import instance_process
from rstar2.config import ConfigError, from_dict, load_file, require, to_dict
from rstar2.data import DataFormat
from rstar2.devices import resolve_device
from rstar2.engine.config import EngineConfig
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.sft_config import SFTConfig
from rstar2.model.tiny_config import TinyModelConfig
from rstar2.reward.reward_config import RewardConfig
from rstar2.rl.rl_config import RLConfig
from rstar2.rollout.config import RolloutConfig
from rstar2.sandbox.config import SandboxConfig
from rstar2.scheduler import SchedulerConfig
from rstar2.tasks.arithmetic import TaskConfig
from rstar2.train.cluster_config import ClusterConfig


@dataclass
class StageConfig:
    """One RL stage (paper: stage 1 8K tokens, stage 2 12K, stage 3 12K on the hard subset)."""

    name: str = "rl1"
    """Stage name, shown in progress lines and metrics."""
    steps: int = 10
    """RL steps in this stage."""
    max_response_tokens: int = 0
    """Token budget of a trajectory in this stage (0 = rollout.max_response_tokens)."""
    max_turns: int = 0
    """Assistant turn limit in this stage (0 = rollout.max_turns)."""
    filter_solved: bool = False
    """Stage 3: before it starts, roll out each problem of the pool `filter_samples` times with
    the current policy and drop the problems solved every time."""
    filter_samples: int = 8
    """Rollouts per problem for the solved-filter (paper: 8)."""
    filter_pool: int = 0
    """Training problems probed by the filter (0 = all). A CPU run probes a subset."""
    reset_optimizer: bool = False
    """Start the stage with a fresh optimizer state (the paper resets it for stage 3)."""

    def validate(self) -> None:
        require(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        require(self.filter_samples >= 1, "filter_samples", self.filter_samples, ">= 1")
        require(self.filter_pool >= 0, "filter_pool", self.filter_pool, ">= 0")


@dataclass
class ModelSource:
    """Where the initial policy comes from."""

    path: str = ""
    """A local Hugging Face model directory; empty = build the tiny embedded default."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Size of the tiny embedded default (used when `path` is empty)."""


@dataclass
class Placement:
    """How the actor graph is laid out."""

    engines: int = 1
    """Rollout workers, each with its own inference engine."""
    sandboxes: int = 1
    """Sandbox (code executor) service instances."""
    processes: int = 1
    """1 = every actor in this process (inproc); N > 1 = rollout workers and sandbox services
    spread over N - 1 spawned local processes (ipc)."""
    worker_processes: bool = False
    """Each rollout worker in a spawned process of its own ("engines-0", "engines-1", ...; the
    tools and the scheduler stay where `processes` and `services_process` put them), so that
    every engine's agent loops, bus traffic and host work run on an event loop and under an
    interpreter lock of their own instead of sharing one (the ceiling of docs/production.md,
    "The event loop's Python"). The engines then get the learner's weights as copies (no
    `cluster.share_weights`)."""
    services_process: bool = False
    """Run the scheduler with the sandbox and reward actors: with `processes = 1` the three in a
    spawned process of their own ("services"), leaving the learner and the rollout workers
    (with their engines, so `cluster.share_weights` still applies) the main process's event
    loop; with more processes the scheduler joins the tools' process."""
    backend: Literal["asyncio", "trio"] = "asyncio"
    """Event loop of the graph (asyncio uses uvloop when installed)."""
    engine_threads: int = 0
    """torch threads per rollout engine (0 = torch's default)."""
    learner_threads: int = 0
    """torch threads for the learner (0 = torch's default)."""
    switch_interval_ms: float = 5.0
    """The interpreter's thread switch interval (`sys.setswitchinterval`) in each process that
    runs a rollout worker with the embedded engine, while it runs: how long the event loop,
    which gives the interpreter lock away in every bus send and receive, may wait to get it
    back from the engine's thread (`rstar2.switch_interval`). 5.0 is Python's default; a GPU
    engine, whose thread runs Python most of the time, wants less (`configs/gpu_20m.toml`)."""

    def processes_of(self) -> dict[str, str]:
        """The process each of the training graph's actors runs in ("main": this one): with
        `processes` 1 all in "main"; 2 the rollout workers and tools (sandbox, reward) in
        "engines"; 3 or more the tools in "tools". `services_process` puts the scheduler with the
        tools, and with `processes` 1 gives them a process of their own, "services". With
        `worker_processes` the rollout workers' entry is "engines" and worker k runs in
        "engines-k" (`process_per_instance`)."""
        workers = "main" if self.processes == 1 and not self.worker_processes else "engines"
        if self.processes == 1:
            tools = "services" if self.services_process else "main"
        else:
            tools = "engines" if self.processes == 2 else "tools"
        return {
            "learner": "main",
            "scheduler": tools if self.services_process else "main",
            "rollout": workers,
            "sandbox": tools,
            "reward": tools,
        }

    def rollout_processes(self) -> list[str]:
        """The processes the rollout workers run in: one each with `worker_processes`."""
        workers = self.processes_of()["rollout"]
        if not self.worker_processes:
            return [workers]
        return [instance_process(workers, k) for k in range(self.engines)]

    def process_count(self) -> int:
        """How many processes the training graph runs in, this one included."""
        others = {p for actor, p in self.processes_of().items() if actor != "rollout"}
        return len(others | set(self.rollout_processes()))

    def validate(self) -> None:
        require(self.engines >= 1, "graph.engines", self.engines, "an integer >= 1")
        require(self.sandboxes >= 1, "graph.sandboxes", self.sandboxes, "an integer >= 1")
        require(self.processes >= 1, "graph.processes", self.processes, "an integer >= 1")
        require(
            self.switch_interval_ms > 0,
            "graph.switch_interval_ms",
            self.switch_interval_ms,
            "a number > 0",
        )


@dataclass
class TrainConfig:
    """A whole training run: SFT (stage 0) then the RL stages, on the actor graph."""

    seed: int = 0
    """Seed of everything: data order, rollout sampling, RoC selection."""
    prompts_per_step: int = 8
    """Prompts per RL step (paper: 512; released script: 128)."""
    rollouts_per_prompt: int = 16
    """Rollouts sampled per prompt, 2G for RoC (paper: 32); `rl.group_size` (G) are kept."""
    heldout_problems: int = 100
    """Validation problems: evaluated after SFT, every `eval_every` steps and at the end; the
    split to watch and tune on (metrics key `heldout_accuracy`)."""
    test_problems: int = 0
    """Test problems: evaluated only after SFT and at the end, the reported result (never
    tuned on); disjoint from training and validation (`rstar2.train.accuracy`). 0: none."""
    evaluate_validation: bool = True
    """Evaluate the validation problems (False: they stay held out, so the test split is the
    same problems, but are never evaluated: an evaluation-only run that reports test alone)."""
    eval_samples: int = 1
    """Samples per problem in every evaluation: accuracy is avg@k (pass@1 averaged over k
    samples), with seeds fixed across evaluations, and a 95% interval over problems."""
    eval_every: int = 10
    """Evaluate validation accuracy every this many RL steps (0 = only after SFT and at the
    end)."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation (0 = greedy)."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many RL steps (and at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are pruned)."""
    rollout_trace: bool = True
    """Record every RL step's trajectories (token counts per turn, tool latencies) in
    `RUN/rollout_trace.jsonl`, the simulator's trace format (`rstar2 sim --trace`)."""
    rollout_trace_tokens: bool = False
    """Also record each trajectory's token ids, loss mask, logprobs and reward in the rollout
    trace, for `rstar2 analyze RUN/rollout_trace.jsonl` (about 10x larger file)."""
    record_every: int = 5
    """Record the full text of every rollout of RL step 1 and of every `record_every`-th step
    in `RUN/trajectories.jsonl`, what `rstar2 view RUN` shows (0: no training step; about
    1 KB a rollout on the embedded default)."""
    record_evaluations: bool = True
    """Also record every evaluation's rollouts (validation and test) in that file."""
    model: ModelSource = field(default_factory=ModelSource)
    """The initial policy."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """The embedded task's problems (train and held-out splits)."""
    data: str = ""
    """Optional JSONL/JSON/Parquet training problems instead of the task (fields: `data_format`)."""
    heldout_data: str = ""
    """Optional JSONL/Parquet held-out problems instead of the task's held-out split: the
    validation problems first, then (without `test_data`) the test problems."""
    test_data: str = ""
    """Optional JSONL/Parquet test problems (else they follow the validation problems)."""
    data_format: DataFormat = field(default_factory=DataFormat)
    """Which fields of the problem files (`data`, `heldout_data`, `test_data`) hold the problem,
    the answer and the id (default: found by name, `rstar2.data.problem_loader`)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Stage 0: SFT on tool-format traces (steps = 0 skips it)."""
    demo_task: dict[str, Any] = field(default_factory=dict)
    """Fields of `[task]` that SFT's demonstrations change (a `[demo_task]` table, e.g.
    `word_style = "templates+verbal"`): the demonstrations are the first `sft.train_problems`
    training problems of `[task]` with these fields replaced. Empty: the run's own task. RL
    trains and is evaluated on `[task]` whatever this says."""
    ood_task: dict[str, Any] = field(default_factory=dict)
    """Fields of `[task]` that `rstar2 experiment`'s out-of-distribution test changes (an
    `[ood_task]` table, e.g. `lexicon = "ood"`, `min_events = 2`): every arm is also evaluated
    on the first `test_problems` held-out problems of that task. Empty: no such test. Never
    trained or tuned on."""
    stages: list[StageConfig] = field(default_factory=lambda: [StageConfig()])
    """The RL stages, in order."""
    rl: RLConfig = field(default_factory=RLConfig)
    """The RL algorithm: RoC or plain GRPO, clip range, penalties."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """The optimiser."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The agent loop."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Each embedded inference engine."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Each sandbox service."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The reward actor's verifier pool."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    """Routing of trajectories to engines."""
    graph: Placement = field(default_factory=Placement)
    """Actor placement."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """The GPU deployment (for `--dry-run` plans and multi-node launches)."""

    def validate(self) -> None:
        require(self.prompts_per_step >= 1, "prompts_per_step", self.prompts_per_step, ">= 1")
        require(
            self.rollouts_per_prompt >= self.rl.group_size or self.rl.algo == "grpo",
            "rollouts_per_prompt",
            self.rollouts_per_prompt,
            f">= rl.group_size ({self.rl.group_size}) for RoC",
        )
        require(
            self.rollouts_per_prompt >= 2, "rollouts_per_prompt", self.rollouts_per_prompt, ">= 2"
        )
        require(self.heldout_problems >= 0, "heldout_problems", self.heldout_problems, ">= 0")
        require(self.test_problems >= 0, "test_problems", self.test_problems, ">= 0")
        require(self.eval_samples >= 1, "eval_samples", self.eval_samples, ">= 1")
        require(self.eval_every >= 0, "eval_every", self.eval_every, ">= 0")
        require(self.record_every >= 0, "record_every", self.record_every, ">= 0")
        require(self.checkpoint_every >= 1, "checkpoint_every", self.checkpoint_every, ">= 1")
        require(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, ">= 1")
        require(len(self.stages) >= 1, "stages", self.stages, "at least one RL stage")
        require(
            self.sandbox.extra_latency_s < self.rollout.tool_timeout_s,
            "sandbox.extra_latency_s",
            self.sandbox.extra_latency_s,
            f"below rollout.tool_timeout_s ({self.rollout.tool_timeout_s}): else every call times out",
        )
        require(
            not (self.rl.max_staleness and self.cluster.colocate),
            "rl.max_staleness",
            self.rl.max_staleness,
            "0 with cluster.colocate (the engines sleep while the learner updates, so nothing "
            "can generate ahead)",
        )
        if self.cluster.share_weights:
            self._check_sharing()
        for sub in (self.rl, self.learner, self.sft, self.task, self.cluster):
            sub.validate()
        self.demonstration_task()  # a bad [demo_task] key or value fails here
        self._task_with(self.ood_task, "ood_task")  # ... and [ood_task]'s

    def _check_sharing(self) -> None:
        """`cluster.share_weights` only where the engines can compute with the learner's own
        tensors (`rstar2.weights.shared_policy`)."""
        why = "with cluster.share_weights (the engines compute with the learner's tensors)"
        for key, value, wanted, ok in (
            ("cluster.engine_backend", self.cluster.engine_backend, '"embedded"',
             self.cluster.engine_backend == "embedded"),
            ("graph.processes", self.graph.processes, "1: the engines in the learner's process",
             self.graph.processes == 1),
            ("graph.worker_processes", self.graph.worker_processes,
             "false: the engines in the learner's process", not self.graph.worker_processes),
            ("cluster.learner_ranks", self.cluster.learner_ranks, "1",
             self.cluster.learner_ranks == 1),
            ("rl.max_staleness", self.rl.max_staleness,
             "0: no engine may generate while the optimizer writes the tensors",
             self.rl.max_staleness == 0),
            ("engine.device", self.engine.device, f"learner.device ({self.learner.device!r})",
             self.engine.device == self.learner.device),
        ):  # fmt: skip
            require(ok, key, value, f"{wanted} {why}")

    def demonstration_task(self) -> TaskConfig:
        """The task SFT's demonstrations come from: `task` with `demo_task`'s fields."""
        return self._task_with(self.demo_task, "demo_task")

    def _task_with(self, fields: dict[str, Any], key: str) -> TaskConfig:
        """`task` with `fields` replaced, validated (errors named under `key`)."""
        if not fields:
            return self.task
        return from_dict(TaskConfig, {**to_dict(self.task), **fields}, key)

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def check_devices(self, cuda_devices: int) -> None:
        """Refuse, before any work, what the devices here cannot run (`cuda_devices`: the GPUs
        torch sees on this host): `cuda` for the learner (and SFT, which runs where the learner
        does) or the embedded engine where torch sees no GPU (SFT would otherwise run to the end
        on one device and the learner fail on the other), and more learner ranks spawned on this
        host than it has GPUs (NCCL cannot put two ranks on one GPU)."""
        wanted = [("learner.device", self.learner.device)]
        if self.cluster.engine_backend == "embedded":
            wanted.append(("engine.device", self.engine.device))
        for key, value in wanted:
            require(
                value != "cuda" or cuda_devices > 0,
                key,
                value,
                "'cpu' or 'auto': torch sees no GPU here (torch.cuda.is_available() is False)",
            )
        learner = resolve_device(self.learner.device, "learner.device", cuda_devices=cuda_devices)
        on_gpu = learner.type == "cuda"
        spawned_here = not self.cluster.learner_rendezvous
        require(
            not (on_gpu and spawned_here) or self.cluster.learner_ranks <= cuda_devices,
            "cluster.learner_ranks",
            self.cluster.learner_ranks,
            f"<= {cuda_devices}, the GPUs torch sees on this host, where the learner spawns its "
            "ranks (one GPU each); set cluster.learner_rendezvous to start ranks on other hosts "
            "(docs/production.md)",
        )


QUICK: dict[str, Any] = {
    "prompts_per_step": 4,
    "rollouts_per_prompt": 8,
    "heldout_problems": 32,
    "test_problems": 32,
    "eval_every": 0,
    "checkpoint_every": 2,
    "task": {
        "min_digits": 1,
        "max_digits": 1,
        "max_operands": 2,
        "ops": "+-*",
        "word_fraction": 0.0,
        "word_style": "templates",
        "train_size": 600,
        "heldout_size": 100,
    },
    "demo_task": {"word_fraction": 0.0},
    "rl": {"group_size": 4},
    "sft": {
        "steps": 150,
        "lr": 1e-2,
        "train_problems": 400,
        "mistake_fraction": 0.15,
        "log_every": 50,
    },
    "stages": [{"name": "rl1", "steps": 5}],
}
"""The `--quick` preset: a smoke run of about a minute that shows the loop working (tests and
first tries). An easy task (one-digit operands, two of them) and a short SFT give a policy that
solves some problems but not all, so RL steps see mixed groups, earn reward and update. The
demonstrations are of the same bare expressions (the default's [demo_task] is undone)."""


def default_config_text() -> str:
    return resources.files("rstar2.configs").joinpath("tiny.toml").read_text()


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s values, tables merged key by key; a copy that shares nothing with
    `over` (`QUICK`: a `--set stages.0.steps=...` after it once changed the constant)."""
    out = dict(base)
    for k, v in over.items():
        merge = isinstance(v, dict) and isinstance(out.get(k), dict)
        out[k] = _merge(out[k], v) if merge else copy.deepcopy(v)
    return out


def parse_set(item: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (["a", "b"], value); the value is read as JSON when it parses, else str."""
    if "=" not in item:
        raise ConfigError(item, item, "KEY=VALUE")
    key, raw = item.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().split("."), value


def apply_set(data: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set `data[keys[0]][keys[1]]... = value` in place; a number selects an entry of a list
    (`stages.1.steps`), one past its end appends (`stages.3={...}`)."""
    dotted = ".".join(keys)
    node: Any = data
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not k.isdigit() or int(k) > len(node):
                raise ConfigError(dotted, value, f"an index 0..{len(node)} of the list at {k!r}")
            index = int(k)
            if last:
                node[index : index + 1] = [value]
                return
            if index == len(node):
                node.append({})
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[k] = value
                return
            node = node.setdefault(k, {})
        else:
            raise ConfigError(dotted, value, "a key inside a table or list")


def load_train_config(
    path: str | Path | None = None, quick: bool = False, sets: list[str] | None = None
) -> TrainConfig:
    """Defaults <- file (or the embedded tiny.toml) <- --quick <- --set overrides."""
    data = load_file(path) if path else tomllib.loads(default_config_text())
    if quick:
        data = _merge(data, QUICK)
    for item in sets or []:
        apply_set(data, *parse_set(item))
    cfg = from_dict(TrainConfig, data)
    cfg.validate()
    return cfg


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    return to_dict(cfg)
