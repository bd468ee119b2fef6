"""How the zygote is started, and which isolation layers are on: the bubblewrap command line.

Layers, outermost first (each reported at start-up, `IsolationReport`):
- `bwrap`: the zygote runs in bubblewrap with new network, PID, IPC and UTS namespaces, a
  read-only root holding only the C libraries, the Python installation and the site-packages
  directories the preload modules come from (the project's own directory is not mounted; the
  venv's site-packages appear under /opt/rstar2/site*), an empty /tmp, a scrubbed environment;
- `seccomp`, `uid_per_child`, `tmpfs_per_request`, `subreaper`: probed by the zygote itself
  (see `confinement.py`);
- `rlimits` and `wall_clock_timeout`: always on.

What it does not do: start processes (the executor does) or confine children (the zygote does).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rstar2.config import UsageError
from rstar2.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)

SANDBOX_DIR = "/opt/rstar2/sandbox"
_MODULES = (
    "zygote.py",
    "request_child.py",
    "zygote_setup.py",
    "runner.py",
    "framing.py",
    "confinement.py",
)
_HERE = Path(__file__).resolve().parent

LAYER_HELP = {
    "bwrap": "bubblewrap: no network, own PID namespace, read-only minimal filesystem",
    "seccomp": "seccomp: no sockets, exec, ptrace, mount, namespaces or new sessions",
    "uid_per_child": "a distinct unprivileged uid per concurrent child",
    "tmpfs_per_request": "a fresh tmpfs working directory per request",
    "subreaper": "orphans come back to the zygote and die with their request",
    "rlimits": "rlimits: CPU, address space, file size, open files, processes",
    "wall_clock_timeout": "wall-clock timeout killing the whole process group",
}

ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}


class IsolationError(UsageError, RuntimeError):
    """`require_isolation` is set and some layer is unavailable: the settings ask for what
    this machine cannot give, so the CLI reports it as bad input (one line, exit code 2)."""


@dataclass
class IsolationReport:
    layers: dict[str, str] = field(default_factory=dict)
    """Layer name -> "" when active, else why it is not."""

    def missing(self) -> dict[str, str]:
        return {name: why for name, why in self.layers.items() if why}

    def lines(self) -> list[str]:
        out = []
        for name, why in self.layers.items():
            state = "on" if not why else f"OFF ({why})"
            out.append(f"{name:<19} {state:<4}  {LAYER_HELP.get(name, '')}")
        return out

    def log(self) -> None:
        for line in self.lines():
            log.info("sandbox isolation: %s", line)
        for name, why in self.missing().items():
            log.warning("SANDBOX ISOLATION DEGRADED: %s is OFF: %s", name, why)


def bwrap_status(cfg: SandboxConfig) -> str:
    """ "" when bubblewrap can create the namespaces here, else why not."""
    if not cfg.use_bwrap:
        return "disabled by config (use_bwrap = false)"
    path = shutil.which(cfg.bwrap_path)
    if path is None:
        return f"{cfg.bwrap_path!r} not found (apt-get install bubblewrap)"
    probe = [path, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--", "/bin/true"]
    if os.geteuid() != 0:
        probe[1:1] = ["--unshare-user"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap failed to start: {e}"
    if done.returncode != 0:
        return f"bubblewrap cannot create namespaces: {done.stderr.decode(errors='replace')[:200]}"
    return ""


def site_dirs() -> list[str]:
    """The site-packages directories of this interpreter (where preload modules come from)."""
    seen: list[str] = []
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")) and os.path.isdir(entry):
            real = os.path.realpath(entry)
            if real not in seen:
                seen.append(real)
    return seen


def zygote_config(cfg: SandboxConfig, site_paths: list[str]) -> dict[str, object]:
    """What the zygote needs to know (its argv[1])."""
    root = os.geteuid() == 0
    return {
        "concurrency": cfg.concurrency,
        "max_output_bytes": cfg.max_output_bytes,
        "file_size_mb": cfg.file_size_mb,
        "tmpfs_mb": cfg.tmpfs_mb,
        "max_open_files": cfg.max_open_files,
        "max_processes": cfg.max_processes,
        "uid_base": cfg.uid_base if root else None,
        "tmpfs": root,
        "seccomp": True,
        "preload": list(cfg.preload),
        "warmup": cfg.warmup,
        "site_paths": site_paths,
        "extra_latency_s": cfg.extra_latency_s,
    }


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_argv(cfg: SandboxConfig, bwrap: str, python: str, prefix: str) -> list[str]:
    """The full command that starts the zygote inside bubblewrap."""
    root = os.geteuid() == 0
    argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    if not root:
        argv.append("--unshare-user")
    for key, value in ENV.items():
        argv += ["--setenv", key, value]
    bound = [p for p in ("/usr/lib", "/usr/lib64", prefix) if os.path.isdir(p)]
    for path in bound:
        # Parents such as /root are created for the mount; make them traversable (not
        # listable) by the children's uids, whatever their mode on the host.
        for parent in _parents(path):
            argv += ["--perms", "0711", "--dir", parent]
        argv += ["--ro-bind", path, path]
    for link in ("/lib", "/lib64"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link) and not _under(link, bound):
            argv += ["--ro-bind", link, link]
    if os.path.exists("/etc/ld.so.cache"):
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    # /opt and /opt/rstar2 hold the site-packages and the zygote's modules: traversable (not
    # listable) by the children's uids too, or a child could import only what the zygote
    # imported before the fork (bwrap would create them 0700, owned by the zygote's user)
    for parent in _parents(f"{SANDBOX_DIR}/x"):
        argv += ["--perms", "0711", "--dir", parent]
    inside_sites = []
    for i, site in enumerate(site_dirs()):
        if _under(site, bound):
            inside_sites.append(site)
        else:
            argv += ["--ro-bind", site, f"/opt/rstar2/site{i}"]
            inside_sites.append(f"/opt/rstar2/site{i}")
    for name in _MODULES:
        argv += ["--ro-bind", str(_HERE / name), f"{SANDBOX_DIR}/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--remount-ro", "/"]
    if root:
        argv += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN", "CAP_KILL", "CAP_CHOWN"):
            argv += ["--cap-add", cap]
    argv += ["--chdir", "/tmp", python, "-I", "-S", "-B", f"{SANDBOX_DIR}/zygote.py"]
    argv.append(json.dumps(zygote_config(cfg, inside_sites)))
    return argv


def zygote_argv(cfg: SandboxConfig, bwrap_reason: str) -> list[str]:
    """The zygote's command: inside bubblewrap when `bwrap_reason` is "", else bare."""
    python = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not bwrap_reason:
        bwrap = shutil.which(cfg.bwrap_path) or cfg.bwrap_path
        return bwrap_argv(cfg, bwrap, python, prefix)
    script = str(_HERE / "zygote.py")
    return [python, "-I", "-S", "-B", script, json.dumps(zygote_config(cfg, site_dirs()))]
