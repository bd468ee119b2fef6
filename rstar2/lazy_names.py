"""A package's public names loaded from their modules on first use (PEP 562's `__getattr__`).

`rstar2.engine`, `rstar2.model` and `rstar2.rl` name their records and functions at the package
(`from rstar2.model import load_model`) but import torch and transformers only when one of
them is used. Importing a light submodule of theirs (`rstar2.engine.config`,
`rstar2.model.tiny_config`, `rstar2.rl.rl_config`) runs the package's `__init__` first: were
those imports eager, reading a training config would cost seconds of imports (8.5 s for
`rstar2 train --help` before). A name is imported once, then kept in the package's namespace.

Usage, in a package's `__init__.py` (the same names three times: for type checkers and
editors under `TYPE_CHECKING`, for the run time in the map, and in `__all__`;
`tests/test_cli_startup.py` checks that the three agree):

    if TYPE_CHECKING:
        from rstar2.model.loader import load_model
    __all__ = ["load_model", ...]
    __getattr__ = lazy_names(__name__, {"load_model": "rstar2.model.loader", ...})

Written here rather than taken from scientific Python's `lazy_loader`, which does the same:
one more dependency to carry to the GPU machines, which have no network, for 20 lines.

What it does not do: hide import errors (a failing module raises on the name's first use) or
list the names for `dir()` (the package's `__all__` does).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package` that imports each of `homes`' names from its
    module (`homes[name]`) when first asked for, and keeps it in the package."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
