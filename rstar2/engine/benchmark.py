"""The engine benchmark: one fixed workload, run on the embedded engine and on HF `generate`.

Workload: `n` requests with random prompts (16-64 tokens) and heavy-tailed output lengths
(log-normal, median 64 tokens, capped), all submitted at once, sampled at temperature 1 with no
stop tokens, so both sides produce exactly the requested number of tokens. Throughput counts
only those requested tokens. With `turns` T > 1 each request is a conversation of T turns, as
in multi-turn RL with a tool: when a turn ends, its next turn is sent at once as a new request
whose prompt is the context so far, the turn's output and a random "tool response" of 8-48
tokens, with its own output length (no time for the tool itself: this measures the engine).

- Engine: every request goes in at once; continuous batching lets each leave when done. A
  later turn reuses its context's KV blocks from the prefix cache and prefills only the tool
  response and the last sampled token (a continuation).
- HF `model.generate` (batched, KV cache, left padding): requests are sorted by output length
  and cut into batches of `batch_size` (an oracle grouping that favours HF); each batch runs to
  its longest request with `min_new_tokens = max_new_tokens`, so a request that is done keeps
  its row busy until the batch ends (static batching). The sweep over batch sizes reports each
  and the best is the baseline. With turns, a batch runs turn after turn, each a `generate`
  call over the whole contexts (what a trainer without a serving engine does: no KV kept
  between calls), each row's context keeping only its own requested tokens of a turn.

Both run on the engine's device (`engine.device`; "auto" picks a GPU when torch sees one),
each after one untimed warm-up call. The engine is timed again before each HF batch size
(`run_sweep`), so that load from other jobs that comes and goes hits both sides alike and every
HF figure has an engine figure measured next to it. Each timing also records the process's CPU
time (all its threads), which shows threads spinning where wall time alone would not.

Models: `random_model` builds a random-weight Qwen2 of one of `rstar2.model.tiny_config.SHAPES`:
"tiny" (the embedded default's shape, ~1.05M parameters, where Python overhead per step is a
large share), "25m" (~25M parameters, where the matrix products dominate), or the shapes of
Qwen2.5-0.5B / 1.5B (for GPUs).

What it does not do: measure latency, or run anything outside this process (the busy
processes of `--contention` are the command's).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import Qwen2ForCausalLM

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore, StepClock
from rstar2.engine.protocol import SamplingParams
from rstar2.model.tiny import qwen2_config
from rstar2.model.tiny_config import shaped_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    """A later turn of a conversation: the tool response that opens it, its output length."""

    tool_tokens: list[int]
    output_length: int


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lengths: list[int]
    """The first turn's."""
    later_turns: list[list[Turn]] = field(default_factory=list)
    """Per request, its turns after the first (empty: one turn each)."""

    @property
    def total_tokens(self) -> int:
        later = sum(t.output_length for turns in self.later_turns for t in turns)
        return sum(self.output_lengths) + later

    @property
    def turns(self) -> int:
        return 1 + (len(self.later_turns[0]) if self.later_turns else 0)

    def later_of(self, i: int) -> list[Turn]:
        """Request `i`'s turns after the first (none in a one-turn workload)."""
        return self.later_turns[i] if self.later_turns else []

    def longest_context(self) -> int:
        """The most tokens any conversation reaches (its last turn's prompt and output)."""
        return max(
            len(p) + n + sum(len(t.tool_tokens) + t.output_length for t in self.later_of(i))
            for i, (p, n) in enumerate(zip(self.prompts, self.output_lengths, strict=True))
        )


@dataclass
class Timing:
    """One timed run over the whole workload: wall and CPU seconds (every thread of this
    process), the requested tokens per wall second, and what the engine's `StepClock` counted
    during the run (zeros for HF)."""

    seconds: float
    cpu_seconds: float
    tok_s: float
    clock: StepClock = field(default_factory=StepClock)

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


def make_workload(
    n: int, vocab_size: int, max_tokens: int, seed: int = 0, turns: int = 1
) -> Workload:
    """`n` random prompts and log-normal output lengths (median 64, sigma 1, in [4, max]);
    with `turns` > 1, each request's later turns (a random tool response of 8-48 tokens and
    an output length drawn alike). The first turn's draws do not depend on `turns`."""
    if n < 1 or max_tokens < 4 or turns < 1:
        raise ValueError(
            f"need n >= 1, max_tokens >= 4 and turns >= 1, got {n}, {max_tokens} and {turns}"
        )
    g = torch.Generator().manual_seed(seed)

    def lengths(count: int) -> list[int]:
        normal = torch.randn(count, generator=g, dtype=torch.float64)
        return [min(max_tokens, max(4, round(math.exp(math.log(64) + z)))) for z in normal.tolist()]

    prompt_lens = torch.randint(16, 65, (n,), generator=g).tolist()
    prompts = [torch.randint(1, vocab_size, (k,), generator=g).tolist() for k in prompt_lens]
    first = lengths(n)
    if turns == 1:
        return Workload(prompts, first)
    later = []
    for _ in range(n):
        tool_lens = torch.randint(8, 49, (turns - 1,), generator=g).tolist()
        tools = [torch.randint(1, vocab_size, (k,), generator=g).tolist() for k in tool_lens]
        later.append([Turn(t, m) for t, m in zip(tools, lengths(turns - 1), strict=True)])
    return Workload(prompts, first, later)


def engine_core(model: nn.Module, cfg: EngineConfig, work: Workload | None = None) -> EngineCore:
    """A core for repeated runs of the workload, warmed up. Its prefix cache is off for
    one-turn workloads (nothing to continue) and holds one entry per conversation otherwise
    (a finished run's last turns stay parked: longer than any first prompt, so a later run
    of the same prompts cannot take them). Raises ValueError when the workload's longest
    conversation does not fit the model's positions or the KV budget."""
    entries = len(work.prompts) if work is not None and work.later_turns else 0
    core = EngineCore(model, dataclasses.replace(cfg, prefix_cache_entries=entries))
    if work is not None and work.longest_context() > core.max_model_len:
        positions = int(model.config.max_position_embeddings)
        by_kv = core.max_model_len == cfg.num_blocks * cfg.block_size < positions
        raise ValueError(
            f"the workload's longest conversation has {work.longest_context()} tokens, over "
            f"the engine's max_model_len {core.max_model_len} "
            + (
                "(its KV budget): a larger KV budget, fewer turns or a lower max_tokens"
                if by_kv
                else "(the model's positions): fewer turns or a lower max_tokens"
            )
        )
    core.generate([[1, 2, 3, 4]], SamplingParams(4, seed=0))  # warm-up
    return core


def time_engine(core: EngineCore, work: Workload) -> Timing:
    """One run of the whole workload on `core` (all first turns at once, each later turn
    sent as soon as the one before it ends)."""
    before = dataclasses.replace(core.clock)
    start, cpu_start = time.perf_counter(), time.process_time()
    produced = _run_conversations(core, work)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if produced != work.total_tokens:
        raise RuntimeError(f"engine produced {produced} tokens, expected {work.total_tokens}")
    return Timing(seconds, cpu, work.total_tokens / seconds, core.clock.since(before))


_runs = itertools.count()


def _run_conversations(core: EngineCore, work: Workload) -> int:
    """Every conversation of `work` to its end on `core`; the tokens generated."""
    run = next(_runs)
    contexts = [list(p) for p in work.prompts]
    turn_of: dict[str, tuple[int, int]] = {}

    def send(i: int, turn: int, length: int) -> None:
        rid = f"bench-{run}-{i}-{turn}"
        turn_of[rid] = (i, turn)
        core.add_request(
            rid, contexts[i], SamplingParams(length, temperature=1.0, seed=i * work.turns + turn)
        )

    for i, length in enumerate(work.output_lengths):
        send(i, 0, length)
    produced = 0
    while core.has_unfinished():
        for out in core.step():
            i, turn = turn_of.pop(out.request_id)
            produced += len(out.token_ids)
            if turn < len(work.later_of(i)):
                nxt = work.later_of(i)[turn]
                contexts[i] += out.token_ids + nxt.tool_tokens
                send(i, turn + 1, nxt.output_length)
    return produced


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
    core = engine_core(model, cfg, work)
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
    """HF `generate` over the workload in static batches of `batch_size` (sorted by their
    requested tokens), turn after turn, on the model's device (where the engine's core moved
    it: the same device as the engine's)."""
    device = next(model.parameters()).device
    total = [
        n + sum(t.output_length for t in work.later_of(i))
        for i, n in enumerate(work.output_lengths)
    ]
    order = sorted(range(len(work.prompts)), key=lambda i: -total[i])
    computed = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        contexts = [list(work.prompts[i]) for i in idx]
        for turn in range(work.turns):
            lengths = [
                work.output_lengths[i] if turn == 0 else work.later_of(i)[turn - 1].output_length
                for i in idx
            ]
            if turn > 0:
                contexts = [
                    c + work.later_of(i)[turn - 1].tool_tokens
                    for c, i in zip(contexts, idx, strict=True)
                ]
            outputs = _hf_batch(model, contexts, max(lengths), device, pad_id)
            contexts = [c + o[:n] for c, o, n in zip(contexts, outputs, lengths, strict=True)]
            computed += len(idx) * max(lengths)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return HFRun(batch_size, seconds, computed, work.total_tokens / seconds, cpu)


def _hf_batch(
    model: nn.Module, prompts: list[list[int]], new: int, device: torch.device, pad_id: int
) -> list[list[int]]:
    """One left-padded `generate` call; each row's `new` generated tokens."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    out = _hf_generate(model, ids.to(device), mask.to(device), new, pad_id)
    if out.shape[1] != width + new:
        raise RuntimeError(f"HF generated {out.shape[1] - width} tokens, expected {new}")
    return out[:, width:].tolist()
