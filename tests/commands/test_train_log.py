"""`rstar2 train`'s config at start: one short INFO line; the whole resolved config at DEBUG
(and in RUN/config.json, which the runner writes)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rstar2.commands.train import log_config
from rstar2.train.config import load_train_config


def test_the_config_is_a_short_info_line_and_in_full_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 34 row 17: the resolved config was one line of 3.8 KB at INFO
    caplog.set_level(logging.DEBUG, logger="rstar2.commands.train")
    log_config(load_train_config(), tmp_path)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(info) == 1 and len(info[0]) < 300, info
    assert str(tmp_path / "config.json") in info[0] and "RL stages rl1" in info[0]
    assert len(debug) == 1 and debug[0].startswith("resolved config: ")
    assert "stages" in json.loads(debug[0].removeprefix("resolved config: "))
