"""The sandbox bench's snippets do not repeat a call of the zygote's warm-up.

The warm-up runs in the zygote before it forks, and sympy caches results: a snippet that makes
the same call with the same arguments (as the sympy snippet once did with
`sp.integrate(x * sp.sin(x), x)`) is answered from the cache in every child, while the baseline
computes it, so the comparison would not be like with like.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from rstar2.sandbox import zygote_setup
from rstar2.sandbox.bench import WORKLOADS
from tests.sandbox.conftest import Sandbox


def calls_with_arguments(source: str) -> set[str]:
    """Every call in `source` that passes arguments, as normalised source text."""
    return {
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and (node.args or node.keywords)
    }


WARM_CALLS = calls_with_arguments(textwrap.dedent(inspect.getsource(zygote_setup._warm)))


def test_the_rule_catches_the_old_sympy_snippet() -> None:
    old = "import sympy as sp\nx = sp.symbols('x')\nprint(sp.integrate(x * sp.sin(x), x))"
    assert "sp.integrate(x * sp.sin(x), x)" in calls_with_arguments(old) & WARM_CALLS


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_snippet_repeats_no_warm_up_call(name: str) -> None:
    assert calls_with_arguments(WORKLOADS[name]) & WARM_CALLS == set()


@pytest.mark.parametrize("name", ["numpy", "sympy"])
def test_snippet_uses_the_module_the_warm_up_preloads(name: str) -> None:
    # the bench still measures a warm module: the import itself is what the zygote saves
    assert f"import {name}" in WORKLOADS[name]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_snippet_runs_ok_in_the_sandbox(name: str, sandbox: Sandbox) -> None:
    # a failing snippet would be timed as fast failures (the sympy one once needed a submodule
    # the children could not import: `sympy.integrals.prde`)
    result = sandbox.run(WORKLOADS[name])
    assert result.status == "ok", result
