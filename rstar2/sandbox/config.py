"""SandboxConfig: every knob of the code executor, with its default and its bounds.

What it does not do: decide which isolation layers are available (see `isolation.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rstar2.config import require

DEFAULT_PRELOAD = ["math", "fractions", "itertools", "collections", "numpy", "sympy"]


@dataclass
class SandboxConfig:
    concurrency: int = 8
    """Children running at once in one zygote (more wait in the queue)."""

    max_queue: int = 65536
    """Requests admitted but not finished, per executor; beyond it a request is `rejected` at once."""

    max_queue_mb: int = 512
    """Total size of the code and stdin of admitted requests; beyond it new ones are `rejected`."""

    timeout_s: float = 5.0
    """Wall-clock limit of a request that gives none."""

    max_timeout_s: float = 30.0
    """Cap on a request's own `timeout_s`."""

    memory_mb: int = 512
    """Address space a request may add to the warm zygote's, when the request gives none."""

    max_memory_mb: int = 2048
    """Cap on a request's own `memory_mb`."""

    max_output_bytes: int = 65536
    """stdout + stderr bytes kept per request; more kills it with status `output_limit`."""

    max_code_bytes: int = 1 << 20
    """Larger source is `rejected` without running."""

    max_stdin_bytes: int = 1 << 20
    """Larger stdin is `rejected` without running."""

    file_size_mb: int = 16
    """RLIMIT_FSIZE: the largest file a request may write."""

    tmpfs_mb: int = 32
    """Size of the fresh tmpfs each request gets as its working directory and /tmp."""

    max_open_files: int = 64
    """RLIMIT_NOFILE of a request."""

    max_processes: int = 32
    """RLIMIT_NPROC of a request (processes and threads of its uid)."""

    uid_base: int = 61000
    """First of the unprivileged uids given to children (one per slot) when run as root."""

    preload: list[str] = field(default_factory=lambda: list(DEFAULT_PRELOAD))
    """Modules the zygote imports (and warms) once so that requests get them for free."""

    warmup: bool = True
    """Run a few common numpy/sympy calls in the zygote so their lazy set-up is already done."""

    use_bwrap: bool = True
    """Run the zygote inside bubblewrap (namespaces, read-only minimal filesystem view)."""

    bwrap_path: str = "bwrap"
    """The bubblewrap binary (looked up on PATH)."""

    require_isolation: bool = False
    """Refuse to start unless every isolation layer is active."""

    start_timeout_s: float = 60.0
    """How long the zygote may take to import and warm its modules."""

    restart_wait_s: float = 5.0
    """How long a request waits for a zygote while one is being (re)started; after that it is
    answered `rejected` with `infra` "unavailable" (retry later; 503 over HTTP). A killed zygote
    is usually back well within it (0.05 s bare, about 1 s with the default preload)."""

    extra_latency_s: float = 0.0
    """What-if profiling: seconds every request's child sleeps before running its code, in its
    worker slot, as if each tool call's code took that much longer (the paper's tool calls
    take ~0.3 s; the embedded task's `print(...)` calls ~4 ms). It counts against the
    request's timeout. With `concurrency = 1`, `rstar2 profile --set
    sandbox.extra_latency_s=0.3` shows a trainer held back by its sandbox. 0 = off."""

    fault_rate: float = 0.0
    """A noisy tool environment: this share of admitted calls fails as a real sandbox does
    (half a timeout, half "sandbox worker unavailable, please retry") without running, chosen
    by a hash of the call's seed, so reruns meet the same faults (`faults.py`). The model
    reads the failure and must retry; such calls count as tool errors for RoC and are NOT
    masked as infrastructure failures. 0 = off."""

    def validate(self) -> None:
        for key in ("concurrency", "max_queue", "max_queue_mb", "memory_mb", "max_memory_mb"):
            value = getattr(self, key)
            require(value >= 1, key, value, "an integer >= 1")
        for key in ("max_output_bytes", "max_code_bytes", "max_stdin_bytes", "file_size_mb"):
            value = getattr(self, key)
            require(value >= 1, key, value, "an integer >= 1")
        for key in ("tmpfs_mb", "max_open_files", "max_processes"):
            value = getattr(self, key)
            require(value >= 1, key, value, "an integer >= 1")
        require(self.max_open_files >= 16, "max_open_files", self.max_open_files, ">= 16")
        require(self.timeout_s > 0, "timeout_s", self.timeout_s, "a number > 0")
        require(
            self.max_timeout_s >= self.timeout_s,
            "max_timeout_s",
            self.max_timeout_s,
            f">= timeout_s ({self.timeout_s})",
        )
        require(
            self.max_memory_mb >= self.memory_mb,
            "max_memory_mb",
            self.max_memory_mb,
            f">= memory_mb ({self.memory_mb})",
        )
        require(1000 <= self.uid_base <= 2**31 - 65536, "uid_base", self.uid_base, "1000..2^31")
        for i, name in enumerate(self.preload):
            ok = bool(name) and all(part.isidentifier() for part in name.split("."))
            require(ok, f"preload[{i}]", name, "a module name")
        require(self.start_timeout_s > 0, "start_timeout_s", self.start_timeout_s, "> 0")
        require(self.restart_wait_s > 0, "restart_wait_s", self.restart_wait_s, "> 0")
        require(
            0 <= self.extra_latency_s < self.timeout_s,
            "sandbox.extra_latency_s",
            self.extra_latency_s,
            f"a number >= 0 and below timeout_s ({self.timeout_s})",
        )
        require(
            0 <= self.fault_rate < 1, "sandbox.fault_rate", self.fault_rate, "a number in [0, 1)"
        )

    def limits_for(self, timeout_s: float | None, memory_mb: int | None) -> tuple[float, int]:
        """The limits one request runs under: its own (capped) or the defaults."""
        t = self.timeout_s if timeout_s is None or timeout_s <= 0 else timeout_s
        m = self.memory_mb if memory_mb is None or memory_mb <= 0 else memory_mb
        return min(t, self.max_timeout_s), min(m, self.max_memory_mb)
