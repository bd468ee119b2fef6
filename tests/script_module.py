"""A file of `scripts/` imported as a module, for the tests of its functions and `main`.

The scripts are run as `python3 scripts/NAME.py` and are no package, so a test loads one from
its path (`importlib`), under the script's own name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """`scripts/{name}.py`, executed once as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
