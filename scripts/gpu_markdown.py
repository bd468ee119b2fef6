"""`scripts/gpu_figures.py`'s results as Markdown (`DIR/gpu_figures.md`): the engine check,
the engine's host splits and benchmarks, the learner benchmarks with their profiles and
compile reports, and the training runs' figures.

What it does not do: measure anything, or read files (it formats the results dict).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def markdown(results: dict[str, Any]) -> str:
    """The figures as Markdown tables (learner benchmarks, then the training run)."""
    env = results.get("environment", {})
    lines = [f"Device: {env.get('device', '?')}; torch {env.get('torch', '?')}.", ""]
    for run in results.get("invocations", []):  # one that died, or was killed before its end
        if "error" in run or "exit" not in run:
            why = run.get("error", "no end on record (killed, or still running)")
            lines += [f"Invocation `{' '.join(run['argv'])}`: {why}", ""]
    checked = results.get("engine_check")
    if checked:
        lines += [f"Engine check: `{json.dumps(checked)}`", ""]
    for size, split in results.get("engine_host_split", {}).items():
        parts = split.get("ms_per_step")
        if parts is None:
            lines += [f"Engine host split, {size}: failed: {split.get('error')}", ""]
            continue
        shares = ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
        prefills = (f", {split['prefill_steps']} of {split['steps']} steps prefilled"
                    if "prefill_steps" in split else "")  # fmt: skip
        if "aten_ops_per_prefill_step" in split:
            prefills += f", aten ops a prefill step {split['aten_ops_per_prefill_step']}"
        lines += [f"Engine host split, {size} ({split['rows_per_step']} rows, "
                  f"{split['step_ms']:.3f} ms a step{prefills}): {shares} ms", ""]  # fmt: skip
    engines = results.get("engine", {})
    if engines:
        header = ["engine benchmark", "decode", "params", "engine tok/s",
                  "HF generate tok/s (best batch)", "ratio", "graphs"]  # fmt: skip
        lines += table(header, engines, 1, engine_cells)
    benches = results.get("bench", {})
    if benches:
        header = ["model", "variant", "params", "tokens/s", "MFU", "peak MiB (GPU: allocated)",
                  "s/update", "forward / backward / head / optimizer s"]  # fmt: skip
        lines += table(header, benches, 3, bench_cells)
        lines += [line for name, b in benches.items() if (line := profile_line(name, b))]
        lines += [line for name, b in benches.items() if (line := compile_line(name, b))]
    for key, title in (("train", "training run"), ("train_wide", "wide run (4x rollouts)")):
        train = results.get(key)
        if train:
            lines += ["", f"| {title} figure | value |", "|---|---|"]
            lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |"
                      for k, v in train.items()]  # fmt: skip
    variants = results.get("train_variants", {})
    if variants:
        header = ["variant run", "settings", "exit", *VARIANT_FIGURES]
        lines += ["", *table(header, variants, 1, variant_cells)]
    return "\n".join(lines) + "\n"


VARIANT_FIGURES = ("rl_steps", "gen_tokens_per_s", "gen_tokens_per_phase_s", "step_s_mean",
                   "time_gen_s_mean", "time_tool_s_mean",
                   "loop_cpu_share", "worker_loop_cpu_share", "engine_step_ms",
                   "engine_busy_share")  # fmt: skip
"""The figures the variant runs' table compares (`train_figures`' keys)."""


def variant_cells(name: str, run: dict[str, Any]) -> list[str]:
    """A variant run's row: its own settings, exit status and `VARIANT_FIGURES`."""
    values = [run.get(k) for k in VARIANT_FIGURES]
    return [name, ", ".join(run.get("variant", [])) or "(as configured)", str(run.get("exit")),
            *(f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)
              for v in values)]  # fmt: skip


def table(
    header: list[str],
    entries: dict[str, dict[str, Any]],
    error_column: int,
    cells: Callable[[str, dict[str, Any]], list[str]],
) -> list[str]:
    """A Markdown table of `entries` (name -> figures), then an empty line: a row of `cells`
    each, or for an entry that failed its name and "failed: ERROR" in `error_column`."""
    rows = []
    for name, entry in entries.items():
        if "error" in entry:
            row = [name] + [""] * (len(header) - 1)
            row[error_column] = f"failed: {entry['error']}"
        else:
            row = cells(name, entry)
        rows.append(row)
    return [markdown_row(header), "|" + "---|" * len(header), *map(markdown_row, rows), ""]


def markdown_row(cells: list[str]) -> str:
    """`| a | b |`; an empty cell as `| |`."""
    return "|" + "".join(f" {cell} |" if cell else " |" for cell in cells)


def engine_cells(name: str, e: dict[str, Any]) -> list[str]:
    """An engine benchmark's row."""
    return [name, decode_label(e), f"{e['params'] / 1e6:.1f}M", f"{e['engine_tok_s']:,.0f}",
            f"{e['hf_generate_tok_s']:,.0f} ({e['hf_best_batch_size']})", f"{e['ratio']:.2f}",
            graphs_cell(e)]  # fmt: skip


def bench_cells(name: str, b: dict[str, Any]) -> list[str]:
    """A learner benchmark's row."""
    mfu = "-" if b.get("mfu") is None else f"{100 * b['mfu']:.1f}%"
    return [b["shape"], b["variant"], f"{b['model_params'] / 1e6:.1f}M",
            f"{b['tokens_per_s']:,.0f}", mfu, f"{b['peak_memory_mb']:,.0f}", f"{b['step_s']:.3f}",
            split_cell(b)]  # fmt: skip


def graphs_cell(e: dict[str, Any]) -> str:
    """An engine entry's CUDA graphs: the decode's, and the fixed-shape prefills' when on."""
    cell = str(e.get("decode_graphs"))
    if e.get("prefill_graphs"):
        cell += f"; prefills {e['prefill_graphs']}"
    return cell


def profile_line(name: str, b: dict[str, Any], top: int = 5) -> str:
    """A profiled entry (`bench learner --profile`) in one paragraph: the GPU's busy time, FSDP2's
    ranges by phase (host ms, calls) and the top operations (device ms, else CPU ms); "" without
    a profile."""
    prof = b.get("profile")
    if not prof:
        return ""
    where = "device" if prof.get("device_ms") else "cpu"
    ops = ", ".join(f"{op['name']} {op[f'self_{where}_ms']:.1f} ({op['calls']})"
                    for op in prof["ops"][:top])  # fmt: skip
    fsdp = ", ".join(f"{phase.removeprefix('FSDP::')} {v['cpu_ms']:.1f} ({v['calls']})"
                     for phase, v in prof["fsdp"].items())  # fmt: skip
    text = (
        f"Profile, {name}: {where} {prof[f'{where}_ms']:.1f} ms in all{_busy(prof, b)}; top: {ops}"
    )
    return text + (f"; FSDP2 ranges, host ms (calls): {fsdp}" if fsdp else "") + "\n"


def _busy(prof: dict[str, Any], b: dict[str, Any]) -> str:
    """How much of the update the GPU had work (`op_profile.device_busy`): of the profiled
    update, and of an unprofiled one (`step_s`; the profiler slows the host)."""
    if "device_busy_ms" not in prof:
        return ""
    busy = prof["device_busy_ms"]
    text = f" (busy {busy:.1f} ms of the profiled {prof['wall_ms']:.1f}"
    if b.get("step_s"):
        text += f", {busy / (b['step_s'] * 1e3):.0%} of an unprofiled update's {b['step_s']:.3f} s"
    return text + ")"


def compile_line(name: str, b: dict[str, Any]) -> str:
    """What torch.compile did in a compiled entry, when it did not compile cleanly (no graph,
    graph breaks: a checkpointed layer that breaks runs eagerly, or graphs that reduce-overhead
    ran without CUDA graphs); "" otherwise."""
    done = b.get("compiled")
    skips = done.get("cudagraph_skips", 0) if done else 0
    if not done or (done["graphs"] and not done["graph_breaks"] and not skips):
        return ""
    breaks = ", ".join(f"{reason} ({n})" for reason, n in done["graph_breaks"].items())
    text = f"Compile, {name}: {done['graphs']} graphs; graph breaks: {breaks or 'none'}"
    return text + (f"; {skips} ran without CUDA graphs" if skips else "") + "\n"


def split_cell(b: dict[str, Any]) -> str:
    """An update's time split (`time_split_s`): forward, backward, LM head (forward and
    backward; inside the first two) and optimizer seconds."""
    split = b.get("time_split_s") or {}
    if not split:
        return "-"
    head = split.get("head_forward", 0.0) + split.get("head_backward", 0.0)
    parts = [split.get("forward", 0.0), split.get("backward", 0.0), head,
             split.get("optimizer", 0.0)]  # fmt: skip
    return " / ".join(f"{x:.3f}" for x in parts)


def decode_label(figures: dict[str, Any]) -> str:
    """An engine benchmark's decode path, with its steps a round when more than one."""
    steps = figures.get("decode_steps", 1)
    return f"{figures.get('decode')}" + (f", rounds of {steps}" if steps > 1 else "")
