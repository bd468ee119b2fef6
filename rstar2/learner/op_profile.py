"""Which operations a policy update spends its time in: one update under torch.profiler, summed.

`rstar2 bench learner --profile` runs one more update under `torch.profiler` (the CPU's
activity, and CUDA's when the learner computes on a GPU) and reports `summarise(events)`:

- `ops`: the operations with the most self time on the device (a CUDA kernel's time is
  attributed to the aten operation, or compiled graph's launcher, that launched it; the
  kernels' own rows are left out, or each would be listed twice) or, on the CPU, the most self
  CPU time: name, calls, self CPU ms, self device ms. Annotated ranges (FSDP2's, the
  optimizer's) are left out: their self time is the host's bookkeeping, which `fsdp` reports;
- `fsdp`: FSDP2's own work by phase (its `record_function` ranges: `FSDP::pre_forward`,
  `FSDP::post_backward_reduce`, ..., summed over the modules they name): calls, CPU ms inside
  the range (its children included: the all-gather copies, the casts), device ms of the
  kernels launched inside it (the host's rows: the profiler also draws each range on the
  GPU's timeline, a row of its own that counted each call twice before 2026-11-30);
- `cpu_ms` / `device_ms`: the update's total self time on the host and the device. The
  device's is summed over the device's own events (kernels, copies), as torch.profiler's table
  totals it: an operation's row carries its kernels' time too, so summing every row counts
  each kernel twice (what this reported before 2026-11-30; run 8's `device_ms` figures are
  such double sums);
- `wall_ms`: the profiled call's wall time (the device synchronised), and on a GPU
  `device_busy_ms`, the time at least one kernel or copy ran (their intervals' union: overlaps
  count once), with `device_idle_share` = 1 - busy / wall. The profiler adds host time to every
  operation, so the profiled wall time is longer and this share larger than an unprofiled
  update's; `busy / step_s` (bench learner's unprofiled update time) bounds the unprofiled
  idle share from the other side. An update whose GPU idles much of its time is bound by the
  host's launches, not by the GPU.

It is how the FSDP2 entries of `scripts/gpu_figures.py --part bench` say where their time
above the plain learner's goes (docs/production.md, issue 30's targets): the host's hooks
around each unit (`pre_forward`, `post_backward_*`), the gathers and reductions, or the
layers' kernels themselves.

What it does not do: time the update (the profiler slows it: `bench learner` times updates
without it), or trace several ranks (rank 0's process only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
from torch.autograd import DeviceType

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
    device_type: DeviceType
    is_user_annotation: bool


def device_work(row: Any) -> bool:
    """A row or event that is the device's own work (a kernel, a copy, a memset), not a host
    operation carrying its kernels' time, nor a range annotated on the device's timeline."""
    return row.device_type != DeviceType.CPU and not row.is_user_annotation


def busy_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of `(start, end)` intervals in microseconds, in milliseconds
    (kernels that overlap, on two streams, count once)."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total * 1e-3


def fsdp_phase(key: str) -> str:
    """`FSDP::pre_forward (model.layers.3)` -> `FSDP::pre_forward`;
    `FSDP::backward_prefetch for model.layers.2` -> `FSDP::backward_prefetch`."""
    return key.split(" (", 1)[0].split(" for ", 1)[0]


def summarise(rows: Iterable[OpStats], on_device: bool, top: int = 15) -> dict[str, Any]:
    """The profile of one update (see the module's docstring); times in milliseconds."""
    rows = list(rows)
    ms = 1e-3
    ops = [r for r in rows if not r.key.startswith(ANNOTATED) and not device_work(r)]
    ops.sort(key=lambda r: r.self_device_time_total if on_device else r.self_cpu_time_total)
    fsdp: dict[str, dict[str, float]] = {}
    for r in rows:  # the host's rows: a range's copy on the GPU's timeline would count it twice
        if r.key.startswith(FSDP_PREFIX) and r.device_type == DeviceType.CPU:
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
        "device_ms": sum(r.self_device_time_total for r in rows if device_work(r)) * ms,
    }


def compile_report(counters: dict[str, Any]) -> dict[str, Any]:
    """What torch.compile did, from dynamo's counters (`torch._dynamo.utils.counters`):
    `graphs` compiled, `graph_breaks` by reason (the first line of dynamo's explanation;
    `graph_break` and `unimplemented` counters, which between them name the breaks, the
    untraceable code and a backend's failures), `frames` (`total`, `ok`: the frames dynamo
    tried and those it compiled) and `cudagraph_skips` (graphs that "reduce-overhead" ran
    without CUDA graphs: inductor logs why). A compiled layer that breaks runs in pieces, and
    one under activation checkpointing that breaks runs eagerly altogether, so a GPU run says
    here whether its layers really were compiled."""
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
        "cudagraph_skips": int(counters.get("inductor", {}).get("cudagraph_skips", 0)),
    }


def profile_call(fn: Callable[[], Any], device: torch.device, top: int = 15) -> dict[str, Any]:
    """`summarise` of what `fn()` runs, the device synchronised before and after."""
    from torch.profiler import ProfilerActivity, profile

    on_device = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    if on_device:
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        fn()
        if on_device:
            torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    out = summarise(prof.key_averages(), on_device, top)
    out["wall_ms"] = wall_ms
    if on_device:
        out.update(device_busy(prof.events(), wall_ms))
    return out


def device_busy(events: Iterable[Any], wall_ms: float) -> dict[str, float]:
    """`device_busy_ms` and `device_idle_share` of a profiled call that took `wall_ms` (see
    the module docstring), from its events (`time_range` in microseconds)."""
    busy = busy_ms((e.time_range.start, e.time_range.end) for e in events if device_work(e))
    return {"device_busy_ms": busy, "device_idle_share": max(0.0, 1 - busy / wall_ms)}
