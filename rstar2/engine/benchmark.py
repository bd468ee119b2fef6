"""The engine benchmark: one fixed workload, run on the embedded engine and on HF `generate`.

Workload: `n` requests with random prompts (16-64 tokens) and heavy-tailed output lengths
(log-normal, median 64 tokens, capped), all submitted at once, sampled at temperature 1 with no
stop tokens, so both sides produce exactly the requested number of tokens. Throughput counts
only those requested tokens.

- Engine: every request goes in at once; continuous batching lets each leave when done.
- HF `model.generate` (batched, KV cache, left padding): requests are sorted by output length
  and cut into batches of `batch_size` (an oracle grouping that favours HF); each batch runs to
  its longest request with `min_new_tokens = max_new_tokens`, so a request that is done keeps
  its row busy until the batch ends (static batching). The sweep over batch sizes reports each
  and the best is the baseline.

Both run on the engine's device (`engine.device`; "auto" picks a GPU when torch sees one),
each after one untimed warm-up call. The engine is timed again before each HF batch size
(`run_sweep`), so that load from other jobs that comes and goes hits both sides alike and every
HF figure has an engine figure measured next to it. Each timing also records the process's CPU
time (all its threads), which shows threads spinning where wall time alone would not.

Models: `random_model` builds a random-weight Qwen2 of one of `rstar2.model.tiny.SHAPES`:
"tiny" (the embedded default's shape, ~1.05M parameters, where Python overhead per step is a
large share), "25m" (~25M parameters, where the matrix products dominate), or the shapes of
Qwen2.5-0.5B / 1.5B (for GPUs).

What it does not do: measure latency, or run anything outside this process (the busy
processes of `--contention` are the command's).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import Qwen2ForCausalLM

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from rstar2.model.tiny import qwen2_config, shaped_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lengths: list[int]

    @property
    def total_tokens(self) -> int:
        return sum(self.output_lengths)


@dataclass
class Timing:
    """One timed run over the whole workload: wall and CPU seconds (every thread of this
    process), and the requested tokens per wall second."""

    seconds: float
    cpu_seconds: float
    tok_s: float
    steps: int = 0
    wait_s: float = 0.0
    """Of `seconds`, the engine steps' wait for the device (`StepClock`)."""
    round_steps: int = 0
    """Of `steps`, those run inside rounds of several decode steps."""
    prefill_steps: int = 0
    prefill_s: float = 0.0
    """Of `steps` and `seconds`, the steps that prefilled prompts."""

    def cpu_us_per_token(self, tokens: int) -> float:
        return self.cpu_seconds * 1e6 / tokens


@dataclass
class HFRun:
    batch_size: int
    seconds: float
    computed_tokens: int
    """Tokens HF generated including those past each request's length (static batching)."""
    tok_s: float
    cpu_seconds: float = 0.0


@dataclass
class Sweep:
    """The engine timed before each HF batch size: `engine[i]` ran just before `hf[i]`."""

    engine: list[Timing]
    hf: list[HFRun]
    core: EngineCore

    @property
    def engine_tok_s(self) -> float:
        return statistics.median(t.tok_s for t in self.engine)

    @property
    def best_hf(self) -> HFRun:
        return max(self.hf, key=lambda r: r.tok_s)


def random_model(
    size: str = "tiny", seed: int = 0, device: torch.device | str = "cpu"
) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 of the shape `SHAPES[size]` (vocabulary, positions and rope
    of the embedded default), initialised on `device` (a 1.5B model's initialisation takes
    seconds on a GPU, a minute on a CPU; the weights differ between the two)."""
    tiny = shaped_config(size)
    config = qwen2_config(tiny, tiny.embedding_rows or tiny.vocab_size)
    torch.manual_seed(seed)
    with torch.device(device):
        return Qwen2ForCausalLM(config).eval()


def tiny_random_model(seed: int = 0) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 of the embedded default's shape (`TinyModelConfig` defaults)."""
    return random_model("tiny", seed)


def make_workload(n: int, vocab_size: int, max_tokens: int, seed: int = 0) -> Workload:
    """`n` random prompts and log-normal output lengths (median 64, sigma 1, in [4, max])."""
    if n < 1 or max_tokens < 4:
        raise ValueError(f"need n >= 1 and max_tokens >= 4, got {n} and {max_tokens}")
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(16, 65, (n,), generator=g).tolist()
    prompts = [torch.randint(1, vocab_size, (k,), generator=g).tolist() for k in prompt_lens]
    normal = torch.randn(n, generator=g, dtype=torch.float64)
    lengths = [min(max_tokens, max(4, round(math.exp(math.log(64) + z)))) for z in normal.tolist()]
    return Workload(prompts, lengths)


def engine_core(model: nn.Module, cfg: EngineConfig) -> EngineCore:
    """A core for repeated runs of the workload, warmed up. Its prefix cache is off: a later
    run of the same prompts would otherwise skip their prefill (a fresh core would not)."""
    core = EngineCore(model, dataclasses.replace(cfg, prefix_cache_entries=0))
    core.generate([[1, 2, 3, 4]], SamplingParams(4, seed=0))  # warm-up
    return core


def time_engine(core: EngineCore, work: Workload) -> Timing:
    """One run of the whole workload on `core` (all requests at once)."""
    params = [SamplingParams(n, temperature=1.0, seed=i) for i, n in enumerate(work.output_lengths)]
    clock = core.clock
    before = dataclasses.replace(clock)
    start, cpu_start = time.perf_counter(), time.process_time()
    outs = core.generate(work.prompts, params)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    produced = sum(len(o.token_ids) for o in outs)
    if produced != work.total_tokens:
        raise RuntimeError(f"engine produced {produced} tokens, expected {work.total_tokens}")
    return Timing(
        seconds,
        cpu,
        work.total_tokens / seconds,
        clock.steps - before.steps,
        clock.wait_s - before.wait_s,
        clock.round_steps - before.round_steps,
        clock.prefill_steps - before.prefill_steps,
        clock.prefill_s - before.prefill_s,
    )


def run_sweep(
    model: nn.Module,
    work: Workload,
    cfg: EngineConfig,
    batch_sizes: list[int],
    progress: Callable[[str], None] = log.info,
) -> Sweep:
    """The engine, then HF at the first batch size, the engine again, HF at the next, ..."""
    if not batch_sizes:
        raise ValueError("need at least one HF batch size")
    core = engine_core(model, cfg)
    warm_up_hf(model)
    sweep = Sweep([], [], core)
    for size in batch_sizes:
        timing = time_engine(core, work)
        progress(f"engine: {timing.seconds:.1f} s, {timing.tok_s:.0f} tok/s")
        sweep.engine.append(timing)
        hf = run_hf(model, work, size)
        progress(f"hf generate batch {size}: {hf.seconds:.1f} s, {hf.tok_s:.0f} tok/s")
        sweep.hf.append(hf)
    return sweep


def _hf_generate(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, new: int, pad_id: int = 0
) -> torch.Tensor:
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=pad_id,
        eos_token_id=None,
    )


@torch.inference_mode()
def warm_up_hf(model: nn.Module) -> None:
    """One short untimed `generate` call (the engine gets one too, in `engine_core`): HF's
    first call pays for building its generation config and logits processors."""
    device = next(model.parameters()).device
    ids = torch.tensor([[1, 2, 3, 4], [0, 5, 6, 7]], device=device)
    _hf_generate(model, ids, (ids != 0).long(), 4)


@torch.inference_mode()
def run_hf(model: nn.Module, work: Workload, batch_size: int, pad_id: int = 0) -> HFRun:
    """HF `generate` over the workload in length-sorted static batches of `batch_size`, on
    the model's device (where the engine's core moved it: the same device as the engine's)."""
    device = next(model.parameters()).device
    order = sorted(range(len(work.prompts)), key=lambda i: -work.output_lengths[i])
    computed = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        width = max(len(work.prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_id)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            prompt = work.prompts[i]
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        new = max(work.output_lengths[i] for i in idx)
        out = _hf_generate(model, ids.to(device), mask.to(device), new, pad_id)
        if out.shape[1] != width + new:
            raise RuntimeError(f"HF generated {out.shape[1] - width} tokens, expected {new}")
        computed += len(idx) * new
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return HFRun(batch_size, seconds, computed, work.total_tokens / seconds, cpu)
