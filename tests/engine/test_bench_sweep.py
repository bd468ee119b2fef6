"""The engine benchmark's sweep: what runs when, the model sizes and the command's conditions."""

from __future__ import annotations

import json

import pytest
import torch

from rstar2.cli import main
from rstar2.engine import benchmark
from rstar2.engine.benchmark import (
    engine_core,
    make_workload,
    random_model,
    run_sweep,
    time_engine,
)
from rstar2.engine.config import EngineConfig
from tests.engine.factories import VOCAB, tiny_qwen2


def test_model_sizes_have_the_documented_parameter_counts() -> None:
    assert sum(p.numel() for p in random_model("tiny").parameters()) == 1_050_752
    assert sum(p.numel() for p in random_model("25m").parameters()) == 25_180_672
    with pytest.raises(ValueError, match="model shape"):
        random_model("7b")


def test_engine_runs_before_each_hf_batch_size_and_hf_is_warmed_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    real = benchmark._hf_generate

    def recording_generate(*args: object, **kwargs: object) -> torch.Tensor:
        events.append("hf call")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(benchmark, "_hf_generate", recording_generate)
    model = tiny_qwen2(dtype=torch.float32)
    work = make_workload(4, VOCAB, 8)
    sweep = run_sweep(model, work, EngineConfig(), [2, 4], progress=events.append)
    kinds = [e.split(":")[0].split(" batch")[0] for e in events]
    # the warm-up call, then engine / HF (2 batches of 2) / engine / HF (1 batch of 4)
    assert kinds == [
        "hf call",
        "engine",
        "hf call",
        "hf call",
        "hf generate",
        "engine",
        "hf call",
        "hf generate",
    ]
    assert [r.batch_size for r in sweep.hf] == [2, 4] and len(sweep.engine) == 2
    assert all(t.cpu_seconds > 0 for t in sweep.engine)


def test_repeated_engine_runs_do_not_reuse_the_previous_runs_prefill() -> None:
    core = engine_core(tiny_qwen2(dtype=torch.float32), EngineConfig())
    work = make_workload(3, VOCAB, 6)
    time_engine(core, work)
    before = core.stats().generated_tokens
    time_engine(core, work)
    # a prefix-cache hit would have skipped the prompts' prefill of the second run
    assert core.cfg.prefix_cache_entries == 0
    assert core.stats().generated_tokens - before == work.total_tokens


def test_bench_engine_under_contention_reports_its_conditions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "engine", "--requests", "4", "--max-tokens", "6", "--batch-sizes", "2,4"]
    assert main([*argv, "--contention", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["contention"] == 1 and result["model_size"] == "tiny"
    assert len(result["engine_runs_tok_s"]) == 2 and len(result["load_avg"]) == 2
    for row in result["hf_sweep"]:
        assert row["paired_ratio"] == pytest.approx(
            row["engine_tok_s_before"] / row["tok_s"], abs=0.006 * row["paired_ratio"] + 0.006
        )
        assert row["cpu_us_per_token"] > 0


def test_model_size_and_model_together_are_a_usage_error(tmp_path: object) -> None:
    model_dir = tmp_path / "m"  # type: ignore[operator]
    tiny_qwen2(dtype=torch.float32).save_pretrained(model_dir)
    (model_dir / "tokenizer.json").write_text("{}")  # --model checks for one; nothing loads it
    argv = ["bench", "engine", "--model", str(model_dir), "--model-size", "25m"]
    assert main(argv) == 2


def test_a_multi_turn_workload_sends_each_later_turn_as_a_continuation() -> None:
    work = make_workload(4, VOCAB, 8, turns=3)
    assert work.turns == 3 and [len(t) for t in work.later_turns] == [2, 2, 2, 2]
    one = make_workload(4, VOCAB, 8)
    assert (work.prompts, work.output_lengths) == (one.prompts, one.output_lengths)
    assert all(8 <= len(t.tool_tokens) <= 48 for turns in work.later_turns for t in turns)
    assert work.total_tokens == one.total_tokens + sum(
        t.output_length for turns in work.later_turns for t in turns
    )
    core = engine_core(tiny_qwen2(dtype=torch.float32), EngineConfig(), work)
    cache = core.scheduler.prefix_cache
    for run in (1, 2):
        timing = time_engine(core, work)  # raises unless every requested token came
        # every later turn took its context's blocks; no first turn took a parked last turn
        assert cache.hits == run * 4 * 2
        assert timing.clock.prefill_steps >= 1 and timing.clock.steps > 0


def test_hf_runs_each_turn_over_the_whole_context(monkeypatch: pytest.MonkeyPatch) -> None:
    widths: list[int] = []
    real = benchmark._hf_generate

    def recording_generate(model, ids, mask, new, pad_id=0):  # type: ignore[no-untyped-def]
        widths.append(ids.shape[1])
        return real(model, ids, mask, new, pad_id)

    monkeypatch.setattr(benchmark, "_hf_generate", recording_generate)
    work = make_workload(1, VOCAB, 8, turns=3)
    run = benchmark.run_hf(tiny_qwen2(dtype=torch.float32), work, 1)
    first, (second, third) = work.output_lengths[0], work.later_turns[0]
    prompt = len(work.prompts[0])
    assert widths == [
        prompt,
        prompt + first + len(second.tool_tokens),
        prompt + first + len(second.tool_tokens) + second.output_length + len(third.tool_tokens),
    ]
    assert run.computed_tokens == work.total_tokens


def test_a_workload_longer_than_the_models_positions_is_refused() -> None:
    work = benchmark.Workload([[1] * 20], [100], [[benchmark.Turn([2] * 40, 400)]])
    assert work.longest_context() == 560
    with pytest.raises(ValueError, match="560 tokens, over the engine's max_model_len 512"):
        engine_core(tiny_qwen2(dtype=torch.float32), EngineConfig(), work)
