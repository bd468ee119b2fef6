"""The zygote's set-up before it serves: preload and warm modules, probe its confinement layers.

`preload(names, warm)` imports the preload modules once (and exercises their common calls, so
lazy imports and caches are filled before any fork); `probe_layers(cfg, flt)` says which
confinement layers work here, turning the per-request tmpfs off where it cannot be mounted.

What it does not do: serve requests (`zygote.py`) or confine a child (`request_child.py`).
Standard library only (plus what the preload list names): it runs inside the sandbox.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from typing import Any

if __package__:  # imported on the host
    from . import confinement
else:  # imported by zygote.py run as a script inside the sandbox
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confinement  # type: ignore[no-redef]

PR_SET_CHILD_SUBREAPER = 36


def preload(names: list[str], warm: bool) -> dict[str, str]:
    """Import `names` (and exercise the common calls); returns {module: error} for failures."""
    errors: dict[str, str] = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a missing optional module is reported, not fatal
            errors[name] = f"{type(e).__name__}: {e}"
    if warm:
        _warm()
    return errors


def _warm() -> None:
    """Run once what snippets commonly call, so lazy imports and caches are filled pre-fork."""
    np = sys.modules.get("numpy")
    if np is not None:
        a = np.arange(12, dtype=float).reshape(3, 4)
        np.linalg.solve(np.eye(3) * 2, np.ones(3))
        np.sort(a, axis=1), a.sum(), a.mean(), a @ a.T, np.random.default_rng(0).random(4)
        str(a), repr(a)
    sp = sys.modules.get("sympy")
    if sp is not None:
        x, y = sp.symbols("x y")
        sp.factor(x**2 - 1), sp.expand((x + y) ** 3), sp.simplify(sp.sin(x) ** 2 + sp.cos(x) ** 2)
        (
            sp.solve([x + y - 2, x - y], [x, y]),
            sp.integrate(x * sp.sin(x), x),
            sp.diff(sp.exp(x**2), x),
        )
        sp.limit(sp.sin(x) / x, x, 0), sp.series(sp.exp(x), x, 0, 4), sp.Rational(3, 4) + 1
        sp.isprime(97), sp.factorint(360), sp.nsimplify(0.5), sp.N(sp.pi, 20), sp.sqrt(8)
        str(sp.Matrix([[1, 2], [3, 4]]).inv()), sp.latex(x**2)


def probe_layers(cfg: dict[str, Any], flt: Any) -> dict[str, str]:
    """Which confinement layers work here: {layer: "" if active else why not}."""
    layers: dict[str, str] = {}
    layers["seccomp"] = "" if flt is not None else "pyseccomp or libseccomp2 is not available"
    layers["uid_per_child"] = (
        "" if cfg.get("uid_base") is not None else "not root: children share the zygote's uid"
    )
    if cfg["tmpfs"]:
        pid = os.fork()
        if pid == 0:
            try:
                confinement.fresh_tmpfs("/tmp", 1, None)
                os._exit(0)
            except BaseException:  # noqa: BLE001 - any failure means the layer is unavailable
                os._exit(1)
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
            cfg["tmpfs"] = False
    layers["tmpfs_per_request"] = (
        "" if cfg["tmpfs"] else "no CAP_SYS_ADMIN: a per-request directory in a shared /tmp"
    )
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    ok = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    layers["subreaper"] = "" if ok else "prctl(PR_SET_CHILD_SUBREAPER) failed"
    return layers
