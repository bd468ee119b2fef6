"""Which requests run in the next engine step, and who is preempted when KV blocks run out.

vLLM's policy, on a fixed pool of blocks:
1. Every running request (oldest first) gets its next token scheduled and, when its last block
   is full, one more block. When the pool is empty the *newest* running request is preempted:
   its blocks are freed, its computed tokens are forgotten and it goes back to the front of the
   waiting queue; it is recomputed (prompt + tokens generated so far) when re-admitted, and
   sampling continues where it stopped, so the output does not change.
2. Only in a step with no preemption are waiting requests admitted, first come first served,
   while blocks for their whole context, a batch slot and the step's token budget allow. A
   prompt longer than the budget is admitted alone (no chunked prefill).
`update()` then appends the sampled tokens and finishes requests (stop token, max_tokens, or
max_model_len). For a round of several decode steps (`engine.decode_steps`), `reserve()` gives
the running requests blocks for the whole round without preempting anyone, and
`update_round()` records the round's tokens as `update()` would have step by step, dropping
what a request drew after its finish. A finished request's blocks are parked in the prefix
cache; a new request whose prompt extends a parked sequence takes its blocks and prefills only
the new tokens (multi-turn continuations). Parked blocks count as free: they are evicted
before anyone is preempted.

What it does not do: run the model or sample (the engine core does), chunked prefill, or
sharing of blocks between live requests.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rstar2.engine.block_pool import BlockPool, blocks_needed
from rstar2.engine.prefix_cache import PrefixCache
from rstar2.engine.request import Request


@dataclass
class ScheduleResult:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    """(request, number of tokens to compute this step), running requests first."""
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


class Scheduler:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        prefix_entries: int = 0,
    ) -> None:
        self.pool = BlockPool(num_blocks)
        self.prefix_cache = PrefixCache(prefix_entries)
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.generated_tokens = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_free_blocks(self) -> int:
        """Blocks available to new work: free ones plus parked (evictable) ones."""
        return self.pool.num_free + self.prefix_cache.num_blocks

    def schedule(self, admit: bool = True) -> ScheduleResult:
        """The next step's requests; waiting ones are admitted only with `admit` (a round of
        decode steps leaves them waiting)."""
        result = ScheduleResult()
        budget = self.max_num_batched_tokens
        # 1) running requests, oldest first; preempt from the newest end when blocks run out
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if self._grow(req, result):
                num_new = req.num_tokens - req.num_computed
                result.scheduled.append((req, num_new))
                budget -= num_new
                i += 1
        # 2) admit waiting requests only when nobody was preempted in this step
        if result.preempted or not admit:
            return result
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.num_tokens > budget and result.scheduled:
                break
            if not self._place(req):
                break
            num_new = req.num_tokens - req.num_computed
            self.waiting.popleft()
            self.recomputed_tokens += req.lost_tokens
            req.lost_tokens = 0
            self.running.append(req)
            result.scheduled.append((req, num_new))
            budget -= num_new
        return result

    def _place(self, req: Request) -> bool:
        """Give a waiting request blocks for its whole context, reusing a parked prefix."""
        entry = None if req.output_ids else self.prefix_cache.take(req.prompt_ids)
        reused = entry.blocks if entry is not None else []
        blocks = self._allocate(blocks_needed(req.num_tokens, self.block_size) - len(reused))
        if blocks is None:
            if entry is not None:
                self.pool.free(self.prefix_cache.put(entry.tokens, entry.blocks))
            return False
        req.blocks = reused + blocks
        req.num_computed = len(entry.tokens) if entry is not None else 0
        return True

    def _allocate(self, n: int) -> list[int] | None:
        """`n` blocks, evicting parked prefixes (oldest first) as needed; None if impossible."""
        while True:
            blocks = self.pool.allocate(n)
            if blocks is not None or not len(self.prefix_cache):
                return blocks
            self.pool.free(self.prefix_cache.evict())

    def _grow(self, req: Request, result: ScheduleResult) -> bool:
        """Give `req` the blocks its next token needs, preempting the newest; False if it lost."""
        need = blocks_needed(req.num_tokens, self.block_size) - len(req.blocks)
        while need > 0:
            blocks = self._allocate(need)
            if blocks is not None:
                req.blocks.extend(blocks)
                return True
            victim = self.running[-1]
            self._preempt(victim)
            result.preempted.append(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.pool.free(req.blocks)
        req.blocks = []
        req.lost_tokens += req.num_computed
        req.num_computed = 0
        self.waiting.appendleft(req)
        self.preemptions += 1

    def update(
        self, scheduled: list[tuple[Request, int]], tokens: list[int], logprobs: list[float]
    ) -> list[Request]:
        """Record one sampled token per scheduled request; return the requests that finished."""
        if not len(scheduled) == len(tokens) == len(logprobs):
            raise ValueError("one token and one logprob per scheduled request")
        finished = []
        for (req, num_new), token, logprob in zip(scheduled, tokens, logprobs, strict=True):
            if self._record(req, num_new, token, logprob):
                finished.append(req)
        return finished

    def reserve(self, rows: list[Request], steps: int) -> list[int] | None:
        """Blocks for a round of up to `steps` decode steps of `rows` (running requests each
        scheduled for one token), taken without preempting anyone (parked prefixes are
        evicted); each row's step count, fewer where its max_tokens or max_model_len ends it
        sooner. None, with nothing changed, when the pool is short."""
        counts = [min(steps, remaining_tokens(r, self.max_model_len)) for r in rows]
        needs = [
            blocks_needed(r.num_computed + c, self.block_size) - len(r.blocks)
            for r, c in zip(rows, counts, strict=True)
        ]
        total = sum(n for n in needs if n > 0)
        if total:
            blocks = self._allocate(total)
            if blocks is None:
                return None
            for req, n in zip(rows, needs, strict=True):
                if n > 0:
                    req.blocks.extend(blocks[:n])
                    blocks = blocks[n:]
        return counts

    def update_round(
        self,
        rows: list[Request],
        counts: list[int],
        tokens: list[list[int]],
        logprobs: list[list[float]],
    ) -> list[Request]:
        """Record a round's tokens (`tokens[j][i]`: row i's token of step j; row i ran
        `counts[i]` steps, `reserve`'s counts) up to each row's finish, as `update` would have
        step by step; the requests that finished."""
        finished = []
        columns = zip(*tokens, strict=True)  # row i's draws, step by step
        lp_columns = zip(*logprobs, strict=True)
        for req, count, drawn_f, drawn_lp in zip(rows, counts, columns, lp_columns, strict=True):
            # a row's tokens at once, not one `_record` each (on a GPU the engine thread's
            # Python is the step's time): up to its first stop token, max_tokens or
            # max_model_len, whichever comes first
            kept = min(count, remaining_tokens(req, self.max_model_len))
            if kept <= 0:
                continue
            drawn = list(map(int, drawn_f[:kept]))
            for stop in req.params.stop_token_ids:
                if stop in drawn:
                    kept = min(kept, drawn.index(stop) + 1)
            del drawn[kept:]
            req.num_computed += kept
            req.output_ids += drawn
            req.logprobs += drawn_lp[:kept]
            self.generated_tokens += kept
            reason = finish_reason(req, self.max_model_len)
            if reason is not None:
                self._finish(req, reason)
                finished.append(req)
        return finished

    def _record(self, req: Request, num_new: int, token: int, logprob: float) -> bool:
        """Append one sampled token; finish `req` (its blocks parked) if it ends here."""
        req.num_computed += num_new
        req.output_ids.append(token)
        req.logprobs.append(logprob)
        self.generated_tokens += 1
        reason = finish_reason(req, self.max_model_len)
        if reason is None:
            return False
        self._finish(req, reason)
        return True

    def _finish(self, req: Request, reason: str) -> None:
        """`req` ends for `reason`: out of the running batch, its computed blocks parked."""
        req.finish_reason = reason
        self.running.remove(req)
        # a round may have reserved blocks past the finish: they hold nothing of the request
        keep = blocks_needed(req.num_computed, self.block_size)
        self.pool.free(req.blocks[keep:])
        tokens = req.token_slice(0, req.num_computed)
        self.pool.free(self.prefix_cache.put(tokens, req.blocks[:keep]))
        req.blocks = []

    def abort(self, request_id: str) -> Request | None:
        """Remove a request wherever it is; None if it is not here."""
        for req in self.running:
            if req.request_id == request_id:
                self._release(req)
                req.finish_reason = "abort"
                return req
        for req in self.waiting:
            if req.request_id == request_id:
                self.waiting.remove(req)
                req.finish_reason = "abort"
                return req
        return None

    def _release(self, req: Request) -> None:
        self.running.remove(req)
        self.pool.free(req.blocks)
        req.blocks = []


def remaining_tokens(req: Request, max_model_len: int) -> int:
    """Tokens `req` may still sample before max_tokens or max_model_len ends it."""
    return min(req.params.max_tokens - len(req.output_ids), max_model_len - req.num_tokens)


def finish_reason(req: Request, max_model_len: int) -> str | None:
    """Why `req` is finished after its latest token, or None if it goes on."""
    if req.output_ids and req.output_ids[-1] in req.params.stop_token_ids:
        return "stop"
    if len(req.output_ids) >= req.params.max_tokens or req.num_tokens >= max_model_len:
        return "length"
    return None
