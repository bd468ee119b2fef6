"""`rstar2 eval` / `chat` settings: a model written by a training run is rolled out with that
run's `[rollout]` table unless `--config` says otherwise; flags override single keys."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from rstar2.commands.rollout_options import add_rollout_arguments, training_run_config
from rstar2.commands.rollout_settings import resolve_settings
from rstar2.config import ConfigError
from tests.stand_in_model import stand_in_model


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_rollout_arguments(parser)
    return parser.parse_args(list(argv))


def _run(tmp_path: Path, rollout: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"stages": [], "rollout": rollout}))
    model = tmp_path / "checkpoints" / "step-000010" / "model"
    model.mkdir(parents=True)
    _model_files(model)
    return model


def test_a_trained_model_gets_its_runs_rollout_settings(tmp_path: Path) -> None:
    model = _run(tmp_path, {"tool_show_time": False, "max_response_tokens": 192})
    found = training_run_config(model)
    assert found is not None and found[0] == (tmp_path / "config.json").resolve()
    assert found[1]["rollout"]["max_response_tokens"] == 192
    settings = resolve_settings(_args("--model", str(model), "--max-turns", "3"))
    assert settings.rollout.tool_show_time is False
    assert settings.rollout.max_response_tokens == 192
    assert settings.rollout.max_turns == 3  # the flag still wins


def test_an_explicit_config_wins_over_the_run(tmp_path: Path) -> None:
    model = _run(tmp_path, {"tool_show_time": False})
    cfg = tmp_path / "eval.toml"
    cfg.write_text("[rollout]\ntool_show_time = true\n")
    assert resolve_settings(
        _args("--model", str(model), "--config", str(cfg))
    ).rollout.tool_show_time


def test_a_model_outside_a_run_gets_the_defaults(tmp_path: Path) -> None:
    model = tmp_path / "plain"
    model.mkdir()
    _model_files(model)
    assert training_run_config(model) is None
    assert resolve_settings(_args("--model", str(model))).rollout.tool_show_time is True


def test_a_bad_value_in_the_run_config_names_the_key(tmp_path: Path) -> None:
    model = _run(tmp_path, {"max_turns": -1})
    with pytest.raises(ConfigError, match="rollout.max_turns"):
        resolve_settings(_args("--model", str(model)))


def test_the_settings_are_a_short_info_line_and_in_full_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 34 row 17: every setting (sandbox, reward, engine) was one long line at INFO
    model = tmp_path / "plain"
    model.mkdir()
    _model_files(model)
    caplog.set_level(logging.DEBUG, logger="rstar2.commands.rollout_settings")
    resolve_settings(_args("--model", str(model), "--max-turns", "3"))
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(info) == 1 and len(info[0]) < 200 and "max_turns 3" in info[0]
    assert len(debug) == 1 and "'sandbox'" in debug[0] and "'reward'" in debug[0]


def _model_files(model: Path) -> None:
    """The files `--model` checks for, as stand-ins (nothing here loads them)."""
    stand_in_model(model, json.dumps({"model_type": "qwen2"}))
