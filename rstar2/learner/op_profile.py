"""Which operations a policy update spends its time in: one update under torch.profiler, summed.

`rstar2 bench learner --profile` runs one more update under `torch.profiler` (the CPU's
activity, and CUDA's when the learner computes on a GPU) and reports `summarise(events)`:

- `ops`: the operations with the most self time on the device (a CUDA kernel's time is
  attributed to the aten operation that launched it) or, on the CPU, the most self CPU time:
  name, calls, self CPU ms, self device ms. Annotated ranges (FSDP2's, the optimizer's) are
  left out: their self time is the host's bookkeeping, which `fsdp` reports;
- `fsdp`: FSDP2's own work by phase (its `record_function` ranges: `FSDP::pre_forward`,
  `FSDP::post_backward_reduce`, ..., summed over the modules they name): calls, CPU ms inside
  the range (its children included: the all-gather copies, the casts), device ms;
- `cpu_ms` / `device_ms`: the update's total self time on the host and the device.

It is how the FSDP2 entries of `scripts/gpu_figures.py --part bench` say where their time
above the plain learner's goes (docs/production.md, issue 30's targets): the host's hooks
around each unit (`pre_forward`, `post_backward_*`), the gathers and reductions, or the
layers' kernels themselves.

What it does not do: time the update (the profiler slows it: `bench learner` times updates
without it), or trace several ranks (rank 0's process only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

FSDP_PREFIX = "FSDP::"
ANNOTATED = ("FSDP::", "Optimizer.", "ProfilerStep", "autograd::engine::evaluate_function")
"""Names of ranges that wrap other operations rather than compute: not among `ops`."""


class OpStats(Protocol):
    """What `summarise` reads of torch.profiler's `key_averages()` rows."""

    key: str
    count: int
    self_cpu_time_total: float  # microseconds
    cpu_time_total: float
    self_device_time_total: float
    device_time_total: float


def fsdp_phase(key: str) -> str:
    """`FSDP::pre_forward (model.layers.3)` -> `FSDP::pre_forward`;
    `FSDP::backward_prefetch for model.layers.2` -> `FSDP::backward_prefetch`."""
    return key.split(" (", 1)[0].split(" for ", 1)[0]


def summarise(rows: Iterable[OpStats], on_device: bool, top: int = 15) -> dict[str, Any]:
    """The profile of one update (see the module's docstring); times in milliseconds."""
    rows = list(rows)
    ms = 1e-3
    ops = [r for r in rows if not r.key.startswith(ANNOTATED)]
    ops.sort(key=lambda r: r.self_device_time_total if on_device else r.self_cpu_time_total)
    fsdp: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.key.startswith(FSDP_PREFIX):
            entry = fsdp.setdefault(
                fsdp_phase(r.key), {"calls": 0, "cpu_ms": 0.0, "device_ms": 0.0}
            )
            entry["calls"] += r.count
            entry["cpu_ms"] += r.cpu_time_total * ms
            entry["device_ms"] += r.device_time_total * ms
    return {
        "ops": [
            {
                "name": r.key,
                "calls": r.count,
                "self_cpu_ms": r.self_cpu_time_total * ms,
                "self_device_ms": r.self_device_time_total * ms,
            }
            for r in reversed(ops[-top:])
        ],
        "fsdp": dict(sorted(fsdp.items(), key=lambda kv: -kv[1]["cpu_ms"])),
        "cpu_ms": sum(r.self_cpu_time_total for r in rows) * ms,
        "device_ms": sum(r.self_device_time_total for r in rows) * ms,
    }


def compile_report(counters: dict[str, Any]) -> dict[str, Any]:
    """What torch.compile did, from dynamo's counters (`torch._dynamo.utils.counters`):
    `graphs` compiled, `graph_breaks` by reason (the first line of dynamo's explanation;
    `graph_break` and `unimplemented` counters, which between them name the breaks, the
    untraceable code and a backend's failures) and `frames` (`total`, `ok`: the frames dynamo
    tried and those it compiled). A compiled layer that breaks runs in pieces, and one under
    activation checkpointing that breaks runs eagerly altogether, so a GPU run says here
    whether its layers really were compiled."""
    breaks: dict[str, int] = {}
    for kind in ("graph_break", "unimplemented"):
        for reason, n in counters.get(kind, {}).items():
            text = str(reason).strip()
            first = text.splitlines()[0][:160] if text else "?"
            breaks[first] = breaks.get(first, 0) + int(n)
    frames = counters.get("frames", {})
    return {
        "graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
        "graph_breaks": breaks,
        "frames": {"total": int(frames.get("total", 0)), "ok": int(frames.get("ok", 0))},
    }


def profile_call(fn: Callable[[], Any], device: torch.device, top: int = 15) -> dict[str, Any]:
    """`summarise` of what `fn()` runs, the device synchronised before and after."""
    from torch.profiler import ProfilerActivity, profile

    on_device = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    if on_device:
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        fn()
        if on_device:
            torch.cuda.synchronize(device)
    return summarise(prof.key_averages(), on_device, top)
