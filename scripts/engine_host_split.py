"""Where an embedded-engine step's host time goes, part by part (docs/production.md).

    python3 scripts/engine_host_split.py [--model-size tiny] [--requests 256] [--max-tokens 256]
                                         [--device cpu|cuda] [--decode fixed|dynamic]
                                         [--decode-steps K] [--prefill-graphs N]
                                         [--turns T] [--count-ops] [--json]

Runs `rstar2 bench engine`'s workload (`--turns T`: conversations of T turns) once (after a
warm-up) with the engine's parts timed: `schedule` (the scheduler's choice of requests),
`batch` (building a dynamic step's index tensors: every step on the dynamic path, a fixed-path
step's prompts and continuations), `fill` (the fixed path's copy of the rows' inputs into its
static buffers), `shape` (the fixed path's bucket choice), `update` (recording the sampled
tokens, finishing requests), `decode` (the fixed path's forward and sampling: on a GPU with
CUDA graphs a replay, which returns before the GPU is done), `forward` (the dynamic path's
forward: a fixed-path step's new prompts, every step on the dynamic path), `sample` (the
dynamic path's sampling), `round` (with `--decode-steps` K > 1, computing a round's later
inputs on the device), with `--prefill-graphs` N `prefill_fill` and `prefill` (the fixed-shape
prefills' copy into their buffers and their forward and sampling, as `fill` and `decode`),
`wait` (the step's one transfer, where the host waits for the device)
and `other` (the rest of the step's Python). Each is milliseconds per decode step (a round of k
steps counts k), over the run. `--count-ops` then runs the workload once more, untimed,
counting the aten operations (each a kernel launch on a GPU) the host dispatches for a prefill
step's prefills (`aten_ops_per_prefill_step`). On the CPU `decode` and `forward` are the computation itself; on
a GPU they are the launches, and `wait` the GPU time the host's work did not cover.

What it does not do: time HF `generate` (`rstar2 bench engine` does), or profile inside torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rstar2.engine import core as core_module
from rstar2.engine.benchmark import (
    Workload,
    engine_core,
    make_workload,
    random_model,
    time_engine,
)
from rstar2.engine.config import EngineConfig, resolve_device
from rstar2.engine.core import EngineCore
from rstar2.model.tiny_config import SHAPES


@contextlib.contextmanager
def wrapped(
    owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """`owner.name` replaced by `wrap(owner.name)` while the block runs, put back after."""
    inner = getattr(owner, name)
    setattr(owner, name, wrap(inner))
    try:
        yield
    finally:
        setattr(owner, name, inner)


def timed(spent: Counter[str], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, adding its wall time to `spent[key]` on every call."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start

    return wrapper


def instrument(core: EngineCore) -> Counter[str]:
    """Wrap the core's parts (instance attributes shadow the methods); their seconds."""
    spent: Counter[str] = Counter()
    core.scheduler.schedule = timed(spent, "schedule", core.scheduler.schedule)  # type: ignore[method-assign]
    core.scheduler.update = timed(spent, "update", core.scheduler.update)  # type: ignore[method-assign]
    core.scheduler.update_round = timed(spent, "update", core.scheduler.update_round)  # type: ignore[method-assign]
    core.transformer.forward = timed(spent, "forward", core.transformer.forward)  # type: ignore[method-assign]
    if core.fixed is not None:
        fixed = core.fixed
        fixed._fill = timed(spent, "fill", fixed._fill)  # type: ignore[method-assign]
        fixed.shape = timed(spent, "shape", fixed.shape)  # type: ignore[method-assign]
        fixed.step = timed(spent, "decode", fixed.step)  # type: ignore[method-assign]
        fixed._round_inputs = timed(spent, "round", fixed._round_inputs)  # type: ignore[method-assign]
    if core.fixed_prefill is not None:
        prefill = core.fixed_prefill
        prefill._fill = timed(spent, "prefill_fill", prefill._fill)  # type: ignore[method-assign]
        prefill.step = timed(spent, "prefill", prefill.step)  # type: ignore[method-assign]
    return spent


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    model = random_model(args.model_size, args.seed, device)
    work = make_workload(
        args.requests, model.config.vocab_size, args.max_tokens, args.seed, args.turns
    )
    cfg = EngineConfig(
        max_num_seqs=args.requests,
        device=device.type,
        decode=args.decode,
        decode_steps=args.decode_steps,
        prefill_graph_tokens=args.prefill_graphs,
    )
    core = engine_core(model, cfg, work)
    time_engine(core, work)  # warm-up: every shape's buffers (and CUDA graphs) made once
    spent = instrument(core)
    # the dynamic step's index tensors and sampling: functions the core's module calls
    with (
        wrapped(core_module, "build_step_batch", lambda f: timed(spent, "batch", f)),
        wrapped(core_module, "sample", lambda f: timed(spent, "sample", f)),
    ):
        timing = time_engine(core, work)
    steps = max(timing.clock.steps, 1)
    spent["wait"] = timing.clock.wait_s
    parts = {k: round(v * 1e3 / steps, 4) for k, v in spent.most_common()}
    parts["other"] = round((timing.seconds - sum(spent.values())) * 1e3 / steps, 4)
    ops = count_prefill_ops(core, work) if args.count_ops else None
    return {
        "model_size": args.model_size,
        "device": str(device),
        "decode": "fixed" if core.fixed is not None else "dynamic",
        "decode_steps": core.round_steps,
        "prefill_graph_tokens": 0 if core.fixed_prefill is None else core.fixed_prefill.max_tokens,
        "requests": args.requests,
        "turns": args.turns,
        "steps": timing.clock.steps,
        "prefill_steps": timing.clock.prefill_steps,
        "rows_per_step": round(work.total_tokens / steps, 1),
        "step_ms": round(timing.seconds * 1e3 / steps, 4),
        "ms_per_step": parts,
        **({} if ops is None else {"aten_ops_per_prefill_step": ops}),
    }


class _OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it (each a kernel launch on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))


def count_prefill_ops(core: EngineCore, work: Workload) -> dict[str, int]:
    """Run the workload once more counting the aten operations the host dispatches for the
    prefills of a prefill step, averaged over those steps: `dynamic` (the index tensors, the
    forward and the sampling of the dynamic path), `fixed_fill` and `fixed_step` (a
    fixed-shape prefill's copy into its buffers, and its forward and sampling: one graph
    replay on a GPU with CUDA graphs). The counting slows the run: it is not timed."""
    counts: Counter[str] = Counter()

    def counted(label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(inner: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **kw: Any) -> Any:
                with _OpCounter() as counter:
                    result = inner(*a, **kw)
                counts[label] += counter.ops
                return result

            return run

        return wrap

    parts = [(core_module, "build_step_batch", "dynamic"), (core.transformer, "forward", "dynamic")]
    if core.fixed is not None:
        parts.append((core.fixed, "sample", "dynamic"))
    if core.fixed_prefill is not None:
        parts += [
            (core.fixed_prefill, "_fill", "fixed_fill"),
            (core.fixed_prefill, "step", "fixed_step"),
        ]
    before = core.clock.prefill_steps
    with contextlib.ExitStack() as stack:
        for owner, name, label in parts:
            stack.enter_context(wrapped(owner, name, counted(label)))
        time_engine(core, work)
    steps = max(core.clock.prefill_steps - before, 1)
    return {label: round(n / steps) for label, n in counts.items()}


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-size", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--device", default="cpu")
    p.add_argument("--decode", choices=("fixed", "dynamic"), default="fixed")
    p.add_argument("--decode-steps", type=int, default=1, help="decode steps a round (fixed)")
    p.add_argument(
        "--prefill-graphs",
        type=int,
        default=0,
        metavar="N",
        help="prefills of up to N new tokens on fixed shapes (fixed; engine.prefill_graph_tokens)",
    )
    p.add_argument("--turns", type=int, default=1, help="turns a request (bench engine --turns)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: leave as is)")
    p.add_argument(
        "--count-ops",
        action="store_true",
        help="then run once more counting the aten ops a prefill step dispatches (not timed)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def split(args: argparse.Namespace) -> dict[str, Any]:
    """The command's measurement in this process (`scripts/gpu_figures.py`'s engine worker
    calls it between `bench engine` entries); torch's thread count is restored after."""
    if args.requests < 1:
        raise ValueError("--requests must be >= 1")
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return measure(args)
    finally:
        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> int:
    p = arguments()
    args = p.parse_args(argv)
    try:
        out = split(args)
    except ValueError as e:
        p.error(str(e))
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"{out['model_size']} on {out['device']}, {out['decode']} decode "
        f"({out['decode_steps']} step(s) a round): {out['steps']} steps, "
        f"{out['rows_per_step']} rows and {out['step_ms']:.3f} ms a step"
    )
    for part, ms in out["ms_per_step"].items():
        print(f"  {part:<10}{ms:8.3f} ms/step")
    for part, n in out.get("aten_ops_per_prefill_step", {}).items():
        print(f"  {part:<10}{n:8d} aten ops a prefill step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
