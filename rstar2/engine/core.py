"""EngineCore: the synchronous embedded engine (continuous batching with torch, CPU or CUDA).

Each `step()` asks the scheduler which requests run (continuing requests decode one token,
new or preempted ones prefill their whole context), runs one forward pass over all of their
tokens, samples one token per request and returns the requests that finished. Requests join
and leave the running batch at every step. KV memory is a fixed pool of blocks; when it runs
out the newest request is preempted and recomputed later (see `scheduler.py`). On the fixed
path with `engine.decode_steps` k > 1, a step with only one-token decodes becomes a round of
up to k decode steps on the device with one transfer back (`_fixed_round`): the same outputs,
the host's scheduling and bookkeeping paid once per round. Every other step then admits
newcomers: the step after an admitting one admits nobody and can be a round, so a request
waits at most one round, and rounds run while new turns keep arriving. With
`engine.prefill_graph_tokens` N, a fixed-path step's prefills of 2 to N new tokens run on fixed
shapes too (`FixedPrefill`), the longer ones through the dynamic forward.

The model, the KV cache, the step's index tensors and the sampling RNGs live on one device
(`engine.device`, or the `device` argument); token ids and logprobs come back as Python values,
and new weights may arrive on any device (`load_state_dict` copies them onto the engine's).

Not thread-safe: one thread drives it (the `AsyncEngine` wrapper serialises all calls).
What it does not do: tokenisation, stop strings, streaming of partial outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from rstar2.engine.config import EngineConfig, resolve_device
from rstar2.engine.decode_graphs import FixedDecoder
from rstar2.engine.kv_cache import KVCache
from rstar2.engine.prefill_graphs import FixedPrefill
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.sampler import sample
from rstar2.engine.scheduler import Scheduler, ScheduleResult
from rstar2.engine.step_batch import build_step_batch
from rstar2.engine.transformer import Transformer
from rstar2.wire import EngineLoad

log = logging.getLogger(__name__)

_INT = {int}


def load_causal_lm(path: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A local Hugging Face causal LM directory as an eval-mode module (never downloads)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"model directory {str(path)!r} does not exist")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return model.eval()


@dataclass
class StepClock:
    """Where the engine's steps spent their wall time, cumulative: on the fixed
    path the step's one device-to-host transfer is where the host waits for the device (a
    CUDA graph's replay returns at once), so `wait_s` is the device time the host's own work
    did not cover and `seconds - wait_s` the host's (scheduling, filling buffers, launching,
    bookkeeping). On the CPU, and on the dynamic path, the computation runs inside the host's
    share and `wait_s` stays near 0."""

    steps: int = 0
    """Decode steps (a round of k steps counts k)."""
    seconds: float = 0.0
    wait_s: float = 0.0
    round_steps: int = 0
    """Of `steps`, those run inside rounds (`engine.decode_steps` > 1)."""
    prefill_steps: int = 0
    """Of `steps`, those that prefilled a prompt or continuation (on the fixed path through
    the dynamic forward, beside the step's one-token decodes)."""
    prefill_s: float = 0.0
    """Of `seconds`, the wall time of the `prefill_steps`."""

    def since(self, before: StepClock) -> StepClock:
        """What this clock counted since `before` (a copy of it taken earlier)."""
        return StepClock(
            *(getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self))
        )


class EngineCore:
    def __init__(
        self,
        model: nn.Module,
        cfg: EngineConfig | None = None,
        seed: int = 0,
        device: torch.device | None = None,
    ) -> None:
        """`model` is moved to `device` (default: `cfg.device` resolved on this machine) in
        place, so a caller sharing the module shares the moved parameters."""
        cfg = cfg or EngineConfig()
        cfg.validate()
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self.cfg = cfg
        self.device = device if device is not None else resolve_device(cfg.device)
        model.to(self.device)
        model_len = cfg.max_model_len or int(model.config.max_position_embeddings)
        capacity = cfg.num_blocks * cfg.block_size
        self.max_model_len = min(model_len, capacity)
        self.vocab_size = int(model.config.vocab_size)
        self.transformer = Transformer(model, self.max_model_len)
        t = self.transformer
        self.cache = KVCache(
            t.num_layers,
            t.num_kv_heads,
            t.head_dim,
            cfg.num_blocks,
            cfg.block_size,
            t.dtype,
            self.device,
        )
        self.scheduler = Scheduler(
            cfg.num_blocks,
            cfg.block_size,
            cfg.max_num_seqs,
            cfg.max_num_batched_tokens,
            self.max_model_len,
            cfg.prefix_cache_entries,
        )
        self._requests: dict[str, Request] = {}
        self._arrivals = 0
        self._shared_generator = torch.Generator(self.device).manual_seed(seed)
        self._seeds = random.Random(seed)  # seeds of unseeded requests on the fixed path
        self.clock = StepClock()
        self.fixed: FixedDecoder | None = None
        self.round_steps = cfg.round_steps(self.device)
        self._admit_next = True
        self.fixed_prefill: FixedPrefill | None = None
        if cfg.fixed_decode(self.device):
            self.fixed = FixedDecoder(
                t, self.cache, cfg.max_num_seqs, self.max_model_len, cfg.cuda_graphs
            )
            if cfg.prefill_tokens(self.device):
                self.fixed_prefill = FixedPrefill(
                    t,
                    self.cache,
                    cfg.max_num_seqs,
                    self.max_model_len,
                    cfg.prefill_tokens(self.device),
                    cfg.cuda_graphs,
                    self.fixed.pool,
                )
        log.info(
            "engine on %s: %d KV tokens in %d blocks, max_model_len %d, max_num_seqs %d, %s decode"
            ", %d step(s) a round, prefills of up to %d new tokens on the fixed path",
            self.device,
            capacity,
            cfg.num_blocks,
            self.max_model_len,
            cfg.max_num_seqs,
            "dynamic"
            if self.fixed is None
            else "fixed" + (" (CUDA graphs)" if self.fixed.graphs else ""),
            self.round_steps,
            0 if self.fixed_prefill is None else self.fixed_prefill.max_tokens,
        )

    def check_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise TypeError/ValueError if the request cannot be accepted (nothing is changed)."""
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a str, got {type(request_id).__name__}")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
        if not isinstance(prompt_ids, list) or not prompt_ids:
            raise ValueError(f"request {request_id!r}: prompt_ids must be a non-empty list")
        # the set of the tokens' types: a C-level pass, a third of the time of an isinstance
        # per token (19 against 58 us for 700 tokens; a whole trajectory is checked each turn)
        if {*map(type, prompt_ids)} != _INT:
            raise TypeError(f"request {request_id!r}: prompt_ids must be ints")
        if min(prompt_ids) < 0 or max(prompt_ids) >= self.vocab_size:
            raise ValueError(f"request {request_id!r}: token ids outside [0, {self.vocab_size})")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(
                f"request {request_id!r}: prompt of {len(prompt_ids)} tokens leaves no room "
                f"below max_model_len {self.max_model_len}"
            )

    def add_request(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        checked: bool = False,
    ) -> None:
        """Queue a request; `checked` when the caller ran `check_request` on these very
        arguments already and hands over a list no one else holds (`AsyncEngine` checks on the
        event loop and passes a copy), else the core checks and copies."""
        if not checked:
            self.check_request(request_id, prompt_ids, params)
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        generator = None
        if params.seed is not None and self.fixed is None:
            # on the engine's device: a seed gives the same draws on every run of one device
            # type, not the same draws on CPU and CUDA (their generators differ); the fixed
            # path draws from the seed itself (`sample_fixed`)
            generator = torch.Generator(self.device).manual_seed(params.seed)
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        ids = prompt_ids if checked else list(prompt_ids)
        req = Request(request_id, ids, params, self._arrivals, generator, seed)
        self._arrivals += 1
        self._requests[request_id] = req
        self.scheduler.add(req)

    def abort(self, request_id: str) -> GenerationOutput | None:
        """Drop a request; its partial output with finish_reason "abort", or None if unknown."""
        req = self.scheduler.abort(request_id)
        if req is None:
            return None
        del self._requests[request_id]
        return req.to_output()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[GenerationOutput]:
        """Run one engine step (or a round of decode steps, above); the requests that
        finished in it."""
        start = time.perf_counter()
        # with rounds, every other step admits newcomers and the one after an admitting step
        # admits nobody (it can be a round): with new turns arriving all the time, rounds
        # would otherwise never run; a newcomer waits at most one step (or round)
        admit = self._admit_next
        result = self.scheduler.schedule(admit=admit)
        if not result.scheduled and not admit:
            admit = True
            result = self.scheduler.schedule()
        if not result.scheduled:
            return []
        self._admit_next = self.round_steps == 1 or not admit
        steps = 1
        prefill = any(n != 1 for _, n in result.scheduled)
        if self.fixed is None:
            batch = build_step_batch(result.scheduled, self.cache)
            logits = self.transformer.forward(batch, self.cache)
            reqs = [r for r, _ in batch.requests]
            tokens, logprobs = sample(logits, reqs, self._shared_generator)
            finished = self.scheduler.update(batch.requests, tokens, logprobs)
        else:
            counts = None if prefill else self._round_counts(result)
            if counts is not None and max(counts) > 1:
                rows = [r for r, _ in result.scheduled]
                finished = self._fixed_round(rows, counts, self.fixed)
                steps = max(counts)
                self.clock.round_steps += steps
            else:
                scheduled, tokens, logprobs = self._fixed_step(result.scheduled, self.fixed)
                finished = self.scheduler.update(scheduled, tokens, logprobs)
        for req in finished:
            del self._requests[req.request_id]
        outputs = [req.to_output() for req in finished]
        elapsed = time.perf_counter() - start
        self.clock.steps += steps
        self.clock.seconds += elapsed
        if prefill:
            self.clock.prefill_steps += 1
            self.clock.prefill_s += elapsed
        return outputs

    def _round_counts(self, result: ScheduleResult) -> list[int] | None:
        """Each scheduled request's steps when this step of one-token decodes can be a round
        of several (`engine.decode_steps` > 1, nobody preempted, blocks for the round free
        without preempting anyone), else None."""
        if self.round_steps == 1 or result.preempted:
            return None
        return self.scheduler.reserve([r for r, _ in result.scheduled], self.round_steps)

    def _fixed_round(
        self, rows: list[Request], counts: list[int], fixed: FixedDecoder
    ) -> list[Request]:
        """A round of decode steps on the fixed path, one device-to-host transfer; the
        requests that finished in it."""
        drawn = self._to_host(fixed.decode_round(rows, [r.seed for r in rows], counts))
        tokens = [step[0] for step in drawn]
        logprobs = [step[1] for step in drawn]
        return self.scheduler.update_round(rows, counts, tokens, logprobs)

    def _fixed_step(
        self, scheduled: list[tuple[Request, int]], fixed: FixedDecoder
    ) -> tuple[list[tuple[Request, int]], list[int], list[float]]:
        """One step with the one-token requests on the fixed-shape path, the prefills (new
        prompts, continuations) short enough for `fixed_prefill` on its fixed shapes and the
        others on the dynamic path; one device-to-host transfer."""
        short = self.fixed_prefill.takes if self.fixed_prefill is not None else lambda n: False
        decode = [r for r, n in scheduled if n == 1]
        graphed = [(r, n) for r, n in scheduled if n != 1 and short(n)]
        prefill = [(r, n) for r, n in scheduled if n != 1 and not short(n)]
        parts, order = [], []
        if graphed:
            assert self.fixed_prefill is not None
            parts.append(self.fixed_prefill.prefill(graphed, [r.seed for r, _ in graphed]))
            order.extend(graphed)
        if prefill:
            batch = build_step_batch(prefill, self.cache)
            logits = self.transformer.forward(batch, self.cache)
            reqs = [r for r, _ in batch.requests]
            parts.append(fixed.sample(logits, reqs, [r.seed for r in reqs]))
            order.extend(batch.requests)
        if decode:
            parts.append(fixed.decode(decode, [r.seed for r in decode]))
            order.extend((r, 1) for r in decode)
        drawn = self._to_host(parts[0] if len(parts) == 1 else torch.cat(parts, dim=1))
        return order, [int(t) for t in drawn[0]], drawn[1]

    def _to_host(self, drawn: torch.Tensor) -> list[Any]:
        """The step's one device-to-host transfer, as lists; where the host waits for the
        device (`StepClock.wait_s`)."""
        start = time.perf_counter()
        values = drawn.tolist()
        self.clock.wait_s += time.perf_counter() - start
        return values

    def stats(self) -> EngineLoad:
        s = self.scheduler
        return EngineLoad(
            kv_capacity_tokens=s.pool.num_blocks * s.block_size,
            kv_free_tokens=s.num_free_blocks * s.block_size,
            running=len(s.running),
            waiting=len(s.waiting),
            preemptions=s.preemptions,
            recomputed_tokens=s.recomputed_tokens,
            generated_tokens=s.generated_tokens,
            steps=self.clock.steps,
            step_s=self.clock.seconds,
            wait_s=self.clock.wait_s,
            round_steps=self.clock.round_steps,
            prefill_steps=self.clock.prefill_steps,
            prefill_s=self.clock.prefill_s,
        )

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy new weights (HF parameter names, any subset, on any device: CPU tensors from
        the wire are copied onto the engine's device) into the shared parameters."""
        own = self.transformer.model.state_dict(keep_vars=True)
        for name, value in state_dict.items():
            if name not in own:
                raise ValueError(f"unknown parameter {name!r} in the new weights")
            if tuple(value.shape) != tuple(own[name].shape):
                raise ValueError(
                    f"parameter {name!r}: shape {tuple(value.shape)}, "
                    f"expected {tuple(own[name].shape)}"
                )
        for name, value in state_dict.items():
            own[name].data.copy_(value)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[GenerationOutput]:
        """Run a whole batch to completion (sync convenience); outputs in prompt order."""
        all_params = params if isinstance(params, list) else [params] * len(prompts)
        if len(all_params) != len(prompts):
            raise ValueError(f"{len(all_params)} sampling params for {len(prompts)} prompts")
        ids = [f"generate-{self._arrivals + i}" for i in range(len(prompts))]
        for rid, prompt, p in zip(ids, prompts, all_params, strict=True):
            self.add_request(rid, prompt, p)
        done: dict[str, GenerationOutput] = {}
        while len(done) < len(ids):
            for out in self.step():
                done[out.request_id] = out
        return [done[rid] for rid in ids]
