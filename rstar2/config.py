"""Typed configuration: dataclasses loaded from TOML (or YAML) and validated on load.

Every component owns one frozen-ish dataclass whose fields carry a docstring right under them
(cleanrl style). `from_dict(Cls, data)` builds it from a plain mapping and checks every key:
an unknown key, a value of the wrong type or a value outside its allowed set raises
`ConfigError`, whose message names the dotted key, the bad value and what was expected. The CLI
turns `ConfigError` into a one-line message and exit code 2, never a traceback.

What it does not do: merging of several files, environment-variable overrides, or schema
migration. Command-line flags override single keys through `override(cfg, "a.b", value)`.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

T = TypeVar("T")


class _Missing:
    """The value of a required config key that was not given."""

    def __repr__(self) -> str:
        return "nothing"


MISSING = _Missing()
"""`ConfigError.value` of a required key that is absent."""


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid. `key` is a dotted config key, a
    command-line flag (`--data`: the message says "argument --data", as argparse does), a
    positional argument by its upper-case name in the usage line (`TRAJECTORIES`: "argument
    TRAJECTORIES"), or `<file>` / `<root>` (the config file itself)."""

    def __init__(self, key: str, value: object, expected: str) -> None:
        self.key = key
        self.value = value
        self.expected = expected
        super().__init__(_message(key, value, expected))


def _message(key: str, value: object, expected: str) -> str:
    if key.startswith("-") or (key.isupper() and key.replace("_", "").isalpha()):
        where = f"argument {key}"
    elif key in ("<file>", "<root>"):
        where = "config file" if key == "<file>" else "config"
    else:
        where = f"config key '{key}'"
    if value is MISSING:
        return f"{where} is missing: expected {expected}"
    return f"{where}: got {value!r}, expected {expected}"


class UsageError(ValueError):
    """A command line the command cannot use beyond what argparse checks: flags that do not go
    together, a path of the wrong kind. The CLI prints the message as one line, exit code 2."""


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML (.toml) or YAML (.yaml/.yml) file into a dict; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("<file>", str(path), "an existing config file")
    text = path.read_text()
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("<file>", str(path), f"valid TOML ({e})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml  # optional dependency: only YAML users need it
        except ImportError:
            raise ConfigError(
                "<file>", str(path), "a .toml file (PyYAML is not installed)"
            ) from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            message = " ".join(str(e).split())
            raise ConfigError("<file>", str(path), f"valid YAML ({message})") from None
        if not isinstance(data, dict):
            raise ConfigError("<file>", str(path), "a mapping at the top level")
        return data
    raise ConfigError("<file>", str(path), "a .toml, .yaml or .yml file")


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass `cls` from `data`, validating every key and value recursively."""
    if not isinstance(data, dict):
        raise ConfigError(prefix or "<root>", data, f"a table of {cls.__name__} settings")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(dotted, value, f"one of the known keys: {known}")
        kwargs[key] = _convert(hints[key], value, dotted)
    for name, f in fields.items():  # a required key (no default) that is absent
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.init and no_default and name not in kwargs:
            dotted = f"{prefix}.{name}" if prefix else name
            raise ConfigError(dotted, MISSING, f"{_kind(hints[name])} (the key has no default)")
    obj = cls(**kwargs)
    _check = getattr(obj, "validate", None)
    if callable(_check):
        try:
            _check()
        except ConfigError as e:  # a validate() names its own keys: prefix them with ours
            if not prefix or e.key == prefix or e.key.startswith(prefix + "."):
                raise
            raise ConfigError(f"{prefix}.{e.key}", e.value, e.expected) from None
    return obj


def _kind(tp: Any) -> str:
    """A config value of type `tp`, in words (for a missing key's message)."""
    origin = get_origin(tp)
    if origin in (list, tuple):
        (item_tp, *_) = get_args(tp) or (Any,)
        return "a list of tables" if dataclasses.is_dataclass(item_tp) else "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a table"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, "a value")


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, key)
            except ConfigError as e:
                errors.append(e.expected)
        raise ConfigError(key, value, " or ".join(errors))
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(key, value, "one of " + ", ".join(repr(c) for c in choices))
        return value
    if origin in (list, tuple):
        (item_tp, *_) = get_args(tp) or (Any,)
        if not isinstance(value, list | tuple):
            raise ConfigError(key, value, "a list")
        items = [_convert(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, value, "a table")
        _, val_tp = get_args(tp) or (Any, Any)
        return {k: _convert(val_tp, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)  # type: ignore[arg-type]
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, value, "true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, value, "an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, value, "a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, value, "a string")
        return value
    raise ConfigError(key, value, f"a value of type {tp}")


def to_dict(obj: Any) -> dict[str, Any]:
    """The resolved config as plain data (for logging at start and for checkpoints)."""
    return dataclasses.asdict(obj)


def override(obj: T, dotted: str, value: Any) -> T:
    """Return a copy of `obj` with the dotted key replaced (validated like a file value)."""
    data = to_dict(obj)
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise ConfigError(dotted, value, "a known key")
        node = node[part]
    if parts[-1] not in node:
        raise ConfigError(dotted, value, "a known key")
    node[parts[-1]] = value
    return from_dict(type(obj), data)


def require(cond: bool, key: str, value: object, expected: str) -> None:
    """Helper for `validate()` methods: raise ConfigError unless `cond` holds."""
    if not cond:
        raise ConfigError(key, value, expected)
