"""A policy written as a model directory loads like the original; run and checkpoint
directories resolve to the policy they hold; `convert checkpoint` writes one from a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rstar2.cli import main
from rstar2.learner.checkpoint import publish_final_policy, save_checkpoint
from rstar2.model.loader import load_model
from rstar2.model.saver import save_model_dir, weight_layout
from rstar2.run_layout import model_dir_of


def _shifted(model: torch.nn.Module, by: float) -> dict[str, torch.Tensor]:
    return {k: v + by for k, v in model.state_dict().items()}


def test_saved_directory_loads_with_the_given_weights_and_source_layout(
    tmp_path: Path, tiny_dir: Path
) -> None:
    model, _ = load_model(tiny_dir)
    weights = _shifted(model, 0.5)
    out = save_model_dir(weights, tiny_dir, tmp_path / "out")
    assert weight_layout(out) == weight_layout(tiny_dir)  # a tied lm_head stays tied
    loaded, tok = load_model(out)
    for name, tensor in loaded.state_dict().items():
        torch.testing.assert_close(tensor, weights[name])
    assert tok.get_vocab() == load_model(tiny_dir)[1].get_vocab()
    assert not list(tmp_path.glob(".*tmp"))


def test_saving_refuses_weights_that_lack_a_tensor(tmp_path: Path, tiny_dir: Path) -> None:
    model, _ = load_model(tiny_dir)
    weights = model.state_dict()
    weights.pop(next(iter(weights)))
    with pytest.raises(ValueError, match="lacks 1 tensor"):
        save_model_dir(weights, tiny_dir, tmp_path / "out")


def _fake_run(tmp_path: Path, tiny_dir: Path, steps: int) -> Path:
    """A run directory with `model-sft/` and a checkpoint per step, each holding `model/`
    whose weights are the starting ones + step."""
    run = tmp_path / "run"
    model, tok = load_model(tiny_dir)
    model.save_pretrained(run / "model-sft")
    tok.save_pretrained(run / "model-sft")
    (run / "config.json").write_text("{}")
    for step in range(1, steps + 1):
        state = {"model": _shifted(model, float(step)), "progress": {"step": step}}
        save_checkpoint(
            run,
            step,
            state,
            keep=5,
            write_model=lambda p, s=step: save_model_dir(_shifted(model, float(s)), tiny_dir, p),
        )
    return run


def test_model_dir_of_resolves_run_checkpoint_and_model_directories(
    tmp_path: Path, tiny_dir: Path
) -> None:
    run = _fake_run(tmp_path, tiny_dir, steps=2)
    ck = run / "checkpoints"
    assert model_dir_of(tiny_dir) == tiny_dir
    assert model_dir_of(ck / "step-000001") == ck / "step-000001" / "model"
    assert model_dir_of(ck) == ck / "step-000002" / "model"
    assert model_dir_of(run) == ck / "step-000002" / "model"  # not finished: the latest
    assert publish_final_policy(run) == run / "model-rl"
    assert model_dir_of(run) == run / "model-rl"
    first = load_model(run / "model-rl")[0].state_dict()
    latest = load_model(ck / "step-000002" / "model")[0].state_dict()
    for name in first:
        torch.testing.assert_close(first[name], latest[name])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model_dir_of(tmp_path / "nope")
    with pytest.raises(NotADirectoryError):
        model_dir_of(run / "config.json")


def test_eval_and_convert_take_a_run_directory(
    tmp_path: Path, tiny_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fake_run(tmp_path, tiny_dir, steps=1)
    # convert checkpoint: from an old-style checkpoint (weights in state.pt)
    assert main(["convert", "checkpoint", str(run), str(tmp_path / "exported")]) == 0
    exported = load_model(tmp_path / "exported")[0].state_dict()
    want = load_model(run / "checkpoints" / "step-000001" / "model")[0].state_dict()
    for name in want:
        torch.testing.assert_close(exported[name], want[name])
    assert main(["convert", "checkpoint", str(run), str(tmp_path / "exported")]) == 2
    assert "not empty" in capsys.readouterr().err
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"problem": "Compute 1 + 2.", "answer": "3"}) + "\n")
    out = tmp_path / "eval.jsonl"
    code = main(["eval", "--model", str(run), "--data", str(problems), "--out", str(out), "--json"])
    assert code == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1
