"""The --dry-run plan of the paper config: valid, and KV figures equal to the simulator's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rstar2.actors.plan import build_plan
from rstar2.commands.train_plan import dry_run_plan, format_plan, memory_plan
from rstar2.config import ConfigError, override
from rstar2.train.config import load_train_config
from rstar2.train.runner import train_graph
from sim.config import SimConfig, resolve_cluster

PAPER = Path(__file__).resolve().parents[2] / "configs" / "paper_qwen3_14b_mi300x.toml"


def test_paper_config_matches_the_paper() -> None:
    cfg = load_train_config(PAPER)
    assert (cfg.prompts_per_step, cfg.rollouts_per_prompt, cfg.rl.group_size) == (512, 32, 16)
    assert (cfg.rl.eps_low, cfg.rl.eps_high, cfg.learner.lr) == (0.2, 0.28, 1e-6)
    assert [s.max_response_tokens for s in cfg.stages] == [8192, 12288, 12288]
    assert [s.max_turns for s in cfg.stages] == [10, 10, 15]
    assert cfg.stages[2].filter_solved and cfg.stages[2].reset_optimizer


def test_plan_kv_matches_simulator() -> None:
    cfg = load_train_config(PAPER)
    plan = memory_plan(cfg)
    sim_cfg = SimConfig(gpus=64, gpu="mi300x", model="qwen3-14b", tp=1)
    cluster = resolve_cluster(sim_cfg, max_len=13312)
    engines, kv_tokens = cluster.num_engines, cluster.kv_tokens
    assert plan["engines"] == engines == 64
    assert plan["kv_pool_tokens_per_engine"] == kv_tokens
    assert plan["kv_bytes_per_token"] == 160 * 1024
    assert plan["max_length_trajectories_per_engine"] == kv_tokens // 13312


def test_dry_run_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "train", "--config", str(PAPER), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "64 rollout engine(s)" in out.stdout and "KV pool" in out.stdout
    assert "learner: 64 ranks (FSDP2) on 8 node(s)" in out.stdout  # the paper's: all GPUs
    assert "colocated (vLLM sleep mode; not verified on GPU)" in out.stdout
    assert "3.7 GB per learner rank" in out.stdout and "does not fit" not in out.stdout


def test_the_learner_planned_is_the_one_train_runs() -> None:
    cfg = override(load_train_config(PAPER), "cluster.learner_ranks", 1)
    plan = memory_plan(cfg)
    assert plan["learner_ranks"] == cfg.cluster.learner_ranks == 1
    assert plan["learner_state_gb_per_rank"] == pytest.approx(16 * 14.8)  # fp32 p, g, m, v
    sharded = memory_plan(override(cfg, "cluster.learner_ranks", 8))
    assert sharded["learner_ranks"] == 8
    assert sharded["learner_state_gb_per_rank"] == pytest.approx(2 * 14.8)
    # 0.9 x 192 GB for the engine + 29.6 GB of learner state > 192 GB: said, not hidden
    assert not sharded["learner_gpu_fits"]
    assert "does not fit beside the engine's share" in format_plan(sharded, cfg)
    lower = override(
        override(cfg, "cluster.learner_ranks", 8), "cluster.gpu_memory_utilization", 0.8
    )
    assert memory_plan(lower)["learner_gpu_fits"]


def test_learner_ranks_are_placed_where_train_starts_them() -> None:
    """Spawned ranks live on node 0, one GPU each, so no more than a node has; ranks met at a
    rendezvous (torchrun/srun on other hosts) span nodes, and the plan says so."""
    cfg = override(load_train_config(PAPER), "cluster.learner_ranks", 1)
    spawned = override(cfg, "cluster.learner_rendezvous", "")
    with pytest.raises(ConfigError, match="cluster.gpus_per_node"):
        override(spawned, "cluster.learner_ranks", 16)
    met = override(cfg, "cluster.learner_rendezvous", "tcp://host0:29500")
    met = override(met, "cluster.learner_ranks", 16)
    text = format_plan(memory_plan(met), met)
    assert "16 ranks (FSDP2) on 2 node(s), one GPU each" in text
    assert "met at tcp://host0:29500" in text and "GPUs 0..15" not in text
    with pytest.raises(ConfigError, match=r"cluster.gpus \(64\)"):
        override(met, "cluster.learner_ranks", 65)


def test_colocation_is_claimed_only_when_configured() -> None:
    cfg = override(load_train_config(PAPER), "cluster.colocate", False)
    apart = format_plan(memory_plan(cfg), cfg)
    assert "not colocated" in apart and "sleep mode" not in apart
    colocated = override(cfg, "cluster.colocate", True)
    text = format_plan(memory_plan(colocated), colocated)
    assert "colocated (vLLM sleep mode; not verified on GPU)" in text


def test_colocation_needs_vllm_engines() -> None:
    cfg = override(load_train_config(PAPER), "cluster.colocate", False)
    embedded = override(cfg, "cluster.engine_backend", "embedded")
    with pytest.raises(ConfigError) as e:
        override(embedded, "cluster.colocate", True)
    assert e.value.key == "cluster.colocate"


def test_dry_run_rejects_bad_values(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(PAPER.read_text().replace("tp = 1", "tp = 3"))
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "train", "--config", str(bad), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "cluster.tp" in out.stderr and "Traceback" not in out.stderr


def test_plan_needs_gpus() -> None:
    with pytest.raises(ValueError):
        memory_plan(load_train_config())


@pytest.mark.parametrize(
    ("processes", "services", "want"),
    [  # learner, scheduler, rollout, sandbox, reward
        (1, False, ("main", "main", "main", "main", "main")),
        (1, True, ("main", "services", "main", "services", "services")),
        (2, False, ("main", "main", "engines", "engines", "engines")),
        (2, True, ("main", "engines", "engines", "engines", "engines")),
        (3, False, ("main", "main", "engines", "tools", "tools")),
        (3, True, ("main", "tools", "engines", "tools", "tools")),
    ],
)
def test_each_actor_runs_in_the_process_the_placement_names(
    processes: int, services: bool, want: tuple[str, ...]
) -> None:
    """`graph.services_process` moves the scheduler to the tools (a process of their own with
    one process), and the graph `train` runs places each actor where `processes_of` says."""
    sets = [f"graph.processes={processes}", f"graph.services_process={str(services).lower()}"]
    cfg = load_train_config(sets=sets)
    where = cfg.graph.processes_of()
    assert tuple(where[a] for a in ("learner", "scheduler", "rollout", "sandbox", "reward")) == want
    assert cfg.graph.process_count() == len(set(want))
    graph = train_graph(cfg, Path("run"), Path("model"), False, None, 0.0)
    assert {a.name: a.process for a in graph.actors} == where


def test_worker_processes_put_each_rollout_worker_in_a_process_of_its_own() -> None:
    """`graph.worker_processes`: rollout worker k in "engines-k", the rest where it was; the
    count says so, and the weights cannot be shared across processes."""
    sets = ["graph.engines=3", "graph.worker_processes=true", "graph.services_process=true"]
    cfg = load_train_config(sets=sets)
    assert cfg.graph.process_count() == 5  # main, services, engines-0..2
    graph = train_graph(cfg, Path("run"), Path("model"), False, None, 0.0)
    plan = build_plan(graph, "/tmp")
    where = {i.name: i.process for i in plan.instances}
    assert where == {
        "learner.0": "main", "scheduler.0": "services", "rollout.0": "engines-0",
        "rollout.1": "engines-1", "rollout.2": "engines-2", "sandbox.0": "services",
        "reward.0": "services",
    }  # fmt: skip
    assert len(set(where.values())) == cfg.graph.process_count()
    placement = dry_run_plan(cfg)["placement"]  # what --dry-run --json shows
    assert placement["rollout"] == ["engines-0", "engines-1", "engines-2"]
    assert placement["learner"] == "main" and placement["sandbox"] == "services"
    with pytest.raises(ConfigError) as e:
        load_train_config(sets=[*sets, "cluster.share_weights=true"])
    assert e.value.key == "graph.worker_processes"


def test_the_rollout_workers_get_the_graphs_switch_interval() -> None:
    """`graph.switch_interval_ms` reaches the rollout workers, which hold it while their
    embedded engines run (`tests/test_switch_interval.py`); `gpu_20m` shortens it."""
    for sets, want in (([], 5.0), (["graph.switch_interval_ms=0.5"], 0.5)):
        graph = train_graph(load_train_config(sets=sets), Path("run"), Path("m"), False, None, 0.0)
        (rollout,) = [a for a in graph.actors if a.name == "rollout"]
        assert rollout.params["switch_interval_ms"] == want
    assert load_train_config("configs/gpu_20m.toml").graph.switch_interval_ms == 0.5
