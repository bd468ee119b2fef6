"""`rstar2 train` answers its help and a config's errors without importing torch or
transformers (8.5-9.3 s of imports on the 2-core CI machine before), and the packages whose
names load on first use (`rstar2.lazy_names`) still give every name they list."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from rstar2.lazy_names import lazy_names

_HEAVY = ("torch", "transformers")

_RUN = """
import sys
from rstar2.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(code, *[name for name in {heavy!r} if name in sys.modules])
"""


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["train", "--help"], 0),
        (["train", "--set", "nope=1"], 2),  # an unknown key
        (["train", "--set", "learner.lr=-1"], 2),  # a bad value
        (["train", "--config", "/no/such/config.toml"], 2),
    ],
)
def test_train_answers_its_help_and_config_errors_without_torch(argv: list[str], code: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _RUN.format(heavy=_HEAVY), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split()[-1:] == [str(code)], (out.stdout[-2000:], out.stderr[-2000:])


@pytest.mark.parametrize("package", ["rstar2.engine", "rstar2.model", "rstar2.rl"])
def test_every_name_a_lazy_package_lists_is_its_modules(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        homes = [
            m
            for m in sys.modules.values()
            if m is not None
            and m.__name__.startswith(package + ".")
            and getattr(m, name, None) is value
        ]
        assert homes, f"{package}.{name} is not the object of any of its modules"
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", ["rstar2.engine", "rstar2.model", "rstar2.rl"])
def test_a_lazy_packages_three_lists_agree(package: str) -> None:
    """The names type checkers see (the `if TYPE_CHECKING:` imports), the ones loaded at run
    time (the map given to `lazy_names`) and `__all__` are the same names from the same
    modules."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(str(module.__file__)).read_text())
    typed: dict[str, str] = {}
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                typed.update((alias.name, imp.module) for alias in imp.names)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if ast.unparse(node.value.func) == "lazy_names":
                lazy = ast.literal_eval(node.value.args[1])
    assert typed and typed == lazy, set(typed.items()) ^ set(lazy.items())
    assert sorted(module.__all__) == sorted(lazy)


def test_a_lazy_name_is_imported_once_and_then_kept() -> None:
    package = types.ModuleType("lazy_test_package")
    package.__getattr__ = lazy_names(package.__name__, {"dumps": "json"})  # type: ignore[attr-defined]
    sys.modules[package.__name__] = package
    try:
        import json

        assert package.dumps is json.dumps  # type: ignore[attr-defined]
        assert package.__dict__["dumps"] is json.dumps  # kept: no second lookup
        with pytest.raises(AttributeError, match="'lazy_test_package' has no attribute 'loads'"):
            package.loads  # type: ignore[attr-defined]  # noqa: B018
    finally:
        del sys.modules[package.__name__]
