"""Secrets out of logs and run directories: `redact(config)` before a config is shown or saved.

A value is secret when its key names key material: `*secret*`, `*password*` / `*passwd*`,
`*credential*`, `private_key`, `api_key`, `access_key` (with any prefix, e.g.
`graph.curve.server_secret_key`), or a bearer token (`token`, `api_token`, `auth_token`,
`access_token`, `refresh_token`, `hf_token`, `session_token`). Such a value is replaced by
`REDACTED` unless it is empty (so a log still says whether a key was set). Token *counts* and
vocabulary tokens (`max_response_tokens`, `eos_token`) are not secrets and are kept.

`redact` walks dicts, lists, tuples and dataclasses and returns plain data (a dataclass as
`dataclasses.asdict` gives it); it never changes its argument.

A config written to a run directory (`RUN/config.json`) is redacted too, and a resumed run
reads it back: a secret config key must therefore be given again on resume (or come from the
environment), and a key that only looks secret would break resume (tests/test_redaction.py
checks that no key of the train config does).

What it does not do: find secrets by their value (a key pasted under an innocent name stays
visible).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"secret|passw(or)?d|credential|private_key|api_key|access_key"
    r"|^((api|auth|access|refresh|hf|session|bearer)_)?token$",
    re.IGNORECASE,
)


def is_secret_key(name: str) -> bool:
    """True when a config key of this name holds key material (see the module docstring)."""
    return bool(_SECRET_KEY.search(name.replace("-", "_")))


def redact(data: Any) -> Any:
    """A copy of `data` (dicts, lists, dataclasses) with every non-empty secret value replaced
    by `REDACTED`."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if isinstance(data, dict):
        return {
            k: REDACTED if is_secret_key(str(k)) and _is_set(v) else redact(v)
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return type(data)(redact(v) for v in data)
    return data


def _is_set(value: Any) -> bool:
    return value is not None and value != "" and value != {} and value != []
