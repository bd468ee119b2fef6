"""Config loading: unknown keys and bad values are errors that name the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from rstar2.config import ConfigError, from_dict, load_file, override, require
from rstar2.train.config import QUICK, load_train_config


@dataclass
class Inner:
    size: int = 4
    """number of things"""


@dataclass
class Outer:
    name: str = "x"
    """a name"""
    rate: float = 1e-6
    """learning rate"""
    mode: Literal["a", "b"] = "a"
    """a choice"""
    tags: list[str] = field(default_factory=list)
    """tags"""
    limit: int | None = None
    """optional limit"""
    inner: Inner = field(default_factory=Inner)
    """nested table"""

    def validate(self) -> None:
        require(self.rate > 0, "rate", self.rate, "a positive number")


def test_defaults_and_values() -> None:
    cfg = from_dict(Outer, {"rate": 3, "inner": {"size": 8}, "tags": ["p"], "limit": 5})
    assert cfg.rate == 3.0 and isinstance(cfg.rate, float)
    assert cfg.inner.size == 8 and cfg.tags == ["p"] and cfg.limit == 5


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"nmae": "x"}, "nmae"),
        ({"inner": {"sise": 1}}, "inner.sise"),
        ({"inner": {"size": "big"}}, "inner.size"),
        ({"inner": {"size": True}}, "inner.size"),
        ({"mode": "c"}, "mode"),
        ({"tags": "p"}, "tags"),
        ({"tags": [1]}, "tags[0]"),
        ({"limit": "x"}, "limit"),
        ({"rate": -1.0}, "rate"),
    ],
)
def test_errors_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(Outer, data)
    assert info.value.key == key
    assert repr(info.value.value) in str(info.value)


def test_load_toml_and_override(tmp_path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('name = "run"\n[inner]\nsize = 2\n')
    cfg = from_dict(Outer, load_file(p))
    assert cfg.inner.size == 2
    assert override(cfg, "inner.size", 9).inner.size == 9
    with pytest.raises(ConfigError):
        override(cfg, "inner.nope", 1)


def test_bad_files(tmp_path) -> None:
    with pytest.raises(ConfigError):
        load_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("x = = 1")
    with pytest.raises(ConfigError):
        load_file(bad)


@dataclass
class Required:
    items: list[Inner]
    """no default"""


def test_a_missing_required_key_is_named_in_plain_words() -> None:
    # issue 34 row 12: an empty [graph] printed "GraphConfig.__init__() missing 1 required ..."
    with pytest.raises(ConfigError) as info:
        from_dict(Required, {}, "graph")
    assert str(info.value) == (
        "config key 'graph.items' is missing: expected a list of tables (the key has no default)"
    )
    assert "__init__" not in str(info.value)


def test_a_flag_is_called_an_argument_not_a_config_key() -> None:
    # issue 34 row 12: flags were called "config key '--data'"
    assert str(ConfigError("--data", "x", "a file")) == "argument --data: got 'x', expected a file"
    assert str(ConfigError("a.b", 1, "2")) == "config key 'a.b': got 1, expected 2"


def test_a_set_on_a_quick_run_leaves_the_next_quick_run_alone() -> None:
    # `_merge` put QUICK's own stage list into the config data; `--set stages.0.steps=...`
    # then changed the constant, and every later --quick config in the process (`experiment`'s
    # arms, the tests that call `rstar2 train` in-process) started from it
    first = load_train_config(quick=True, sets=["stages.0.steps=7"])
    again = load_train_config(quick=True)
    assert first.stages[0].steps == 7
    assert again.stages[0].steps == QUICK["stages"][0]["steps"] != 7
