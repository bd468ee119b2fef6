"""Seeded fault injection: a noisy tool environment (`sandbox.fault_rate`).

The paper's motivation for Resample-on-Correct is environment noise: correct answers reached
through failing tool calls. Our tasks rarely produce such calls, so RoC has little to act on.
`injected_fault(request, rate)` makes a share `rate` of tool calls fail the way a real sandbox
fails, before the code runs, so the model reads a failure and must retry:

- half of the faults are a timeout (status "timeout", no output: what a call cut at its time
  limit reads like);
- the other half a transient error (status "killed", stderr "sandbox worker unavailable,
  please retry": what a call whose worker died reads like).

Which calls fail is a pure function of the request, never of timing: a 64-bit BLAKE2b hash of
the request's `seed` (the agent loop sends its per-turn seed, derived from the trajectory's
seed and the turn index) or, without one, of its id, gives u in [0, 1); the call fails when
u < rate, and the hash's next bits pick the kind. So a rerun with the same seeds meets the same
faults, the same seed always fails the same way, and `rate` = 0 never fails.

Injected faults are NOT infrastructure failures (`ExecResult.infra` stays empty): they are a
stationary property of the environment the policy is trained for, like a flaky real service
the model must learn to retry against, and the trajectories that meet them are exactly what
RoC's tool-error penalty acts on. Masking them would remove that signal (docs/usage.md, "A
noisy tool environment").

What it does not do: spend the time a real timeout costs (a fault is answered at once; add
`sandbox.extra_latency_s` for slower calls), or run the code of a faulted call.
"""

from __future__ import annotations

import hashlib

from rstar2.wire import ExecRequest, ExecResult

TRANSIENT_ERROR = "sandbox worker unavailable, please retry"
FAULT_KINDS = ("timeout", "killed")


def fault_draw(request: ExecRequest) -> tuple[float, int]:
    """(u, kind index): u uniform in [0, 1) and a kind in {0, 1}, both fixed by the request's
    seed (or its id when it has none)."""
    key = f"seed:{request.seed}" if request.seed is not None else f"id:{request.id}"
    digest = hashlib.blake2b(key.encode(), digest_size=9).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return u, digest[8] & 1


def injected_fault(request: ExecRequest, rate: float) -> ExecResult | None:
    """The failure this request meets at fault rate `rate`, or None when it runs normally."""
    if rate <= 0:
        return None
    u, kind = fault_draw(request)
    if u >= rate:
        return None
    if FAULT_KINDS[kind] == "timeout":
        return ExecResult(id=request.id, status="timeout", exit_code=-9)
    return ExecResult(id=request.id, status="killed", stderr=TRANSIENT_ERROR, exit_code=-9)
