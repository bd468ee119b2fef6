"""RolloutConfig validation names the key and the bad value."""

from __future__ import annotations

import pytest

from rstar2.config import ConfigError, from_dict
from rstar2.rollout.config import RolloutConfig


def test_defaults_are_valid():
    cfg = RolloutConfig()
    assert cfg.max_response_tokens >= 1 and cfg.max_turns >= 1


def test_from_dict():
    cfg = from_dict(RolloutConfig, {"max_turns": 30, "tool_show_time": False})
    assert cfg.max_turns == 30 and cfg.tool_show_time is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_response_tokens", 0),
        ("max_turns", 0),
        ("temperature", -0.5),
        ("top_p", 0.0),
        ("tool_timeout_s", 0.0),
        ("tool_wait_s", 1.0),
        ("tool_output_chars", 0),
    ],
)
def test_bad_values_name_the_key(key: str, value: object):
    with pytest.raises(ConfigError, match=f"rollout.{key}"):
        RolloutConfig(**{key: value})


def test_unknown_key():
    with pytest.raises(ConfigError, match="max_tokens"):
        from_dict(RolloutConfig, {"max_tokens": 5})
