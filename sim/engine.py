"""One rollout engine: paged KV in 16-token blocks, vLLM-style admission and preemption.

The model follows vLLM v1's scheduler exactly at step grain:

- A running sequence holding L KV tokens needs a new block before a step iff L % 16 == 0
  (it is about to store token L+1). Sequences hold ceil(L / 16) blocks.
- Each step first serves the running sequences, oldest first. If the blocks they need this step
  exceed the free blocks, the newest running sequence is preempted (its blocks freed, its KV to
  be recomputed from scratch: `recomputed_tokens += L`) and put at the front of the waiting
  queue, repeatedly, until the rest fit. A step that preempted admits nothing.
- Otherwise waiting requests are admitted FCFS while the head fits (its context's blocks plus
  this step's needs) and fewer than `max_num_seqs` run; the step prefills them, which costs
  ``p * prefill`` on top of the decode time. Every running sequence, the new ones included,
  then generates one token; a turn of T tokens takes T steps.
- Prefix cache: when a turn ends its blocks are freed but stay cached (evictable, LRU) under the
  trajectory id, so the next turn on this engine prefills only the new tool-output tokens; the
  cached blocks count as free and are evicted when an allocation needs them. The prompt of a
  prompt id already seen by the engine is not prefilled again (shared prompt prefix; its blocks
  are not modelled as shared). A recompute after preemption prefills everything.

Speed: nothing changes between two "interesting" steps (a turn ending, the blocks running out,
a request arriving), so the engine jumps over all steps in between in O(16): sequence lengths
grow together, so a histogram of L mod 16 gives the blocks needed over j steps in closed form,
and the segment's time is the closed-form sum of affine step times with context growing by
`batch` per step. An arrival interrupts a segment at the end of the step in progress. The
caller owns the clock: `submit` and `boundary` return when the engine next needs a `boundary`.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Iterable

from rstar2.wire import EngineLoad
from sim.cost import CostModel

BLOCK = 16


class Request:
    """One turn of one trajectory on this engine (mutable engine-side state)."""

    __slots__ = (
        "traj",
        "prompt_id",
        "prompt_tokens",
        "context",
        "remaining",
        "final",
        "first_turn",
        "recompute",
        "off",
        "target",
        "admit_no",
    )

    def __init__(
        self,
        traj: int,
        prompt_id: str,
        prompt_tokens: int,
        context: int,
        remaining: int,
        final: bool,
        first_turn: bool,
    ) -> None:
        if context < 1 or remaining < 1:
            raise ValueError(f"need context >= 1 and remaining >= 1, got {context}, {remaining}")
        self.traj = traj
        self.prompt_id = prompt_id
        self.prompt_tokens = prompt_tokens
        self.context = context
        self.remaining = remaining
        self.final = final
        self.first_turn = first_turn
        self.recompute = False
        self.off = 0  # L = off + engine step, while running
        self.target = 0  # engine step at which the turn is complete
        self.admit_no = -1


class EngineModel:
    """A simulated engine. See the module docstring for the model."""

    def __init__(
        self,
        engine_id: int,
        num_blocks: int,
        cost: CostModel,
        max_num_seqs: int,
        timeline: bool = True,
    ) -> None:
        if num_blocks < 1 or max_num_seqs < 1:
            raise ValueError(
                f"need num_blocks >= 1 and max_num_seqs >= 1, got {num_blocks}, {max_num_seqs}"
            )
        self.engine_id = engine_id
        self.num_blocks = num_blocks
        self.cost = cost
        self.max_num_seqs = max_num_seqs
        self.free_blocks = num_blocks
        self.step = 0
        self.running: dict[int, Request] = {}  # admission order; popitem() is the newest
        self.waiting: deque[Request] = deque()
        self._finish_heap: list[tuple[int, int, Request]] = []
        self._phase_hist = [0] * BLOCK  # running sequences by (L - step) % 16
        self._counts: list[int] = [0] * BLOCK
        self._counts_step = -1  # step at which _counts was computed; -1 = stale
        self._sum_off = 0  # sum of L over running = _sum_off + n * step
        self._admit_counter = 0
        self._cache: OrderedDict[int, tuple[int, int]] = OrderedDict()  # traj -> (tokens, blocks)
        self._cached_blocks = 0
        self._prompts_seen: set[str] = set()
        self._prefill_pending = 0
        # current segment: started at _seg_t0, boundary after _pending steps
        self._seg_t0 = 0.0
        self._pending = 0
        self._seg_d0 = 0.0
        self._seg_h = 0.0
        self._seg_p = 0.0
        self.version = 0
        self.wake_at: float | None = None
        # counters
        self.preemptions = 0
        self.recomputed_tokens = 0
        self.generated_tokens = 0
        self.prefill_tokens = 0
        self.cache_hit_tokens = 0
        self.busy_s = 0.0
        self.max_used_blocks = 0
        self.kv_timeline: list[tuple[float, int]] = [(0.0, 0)]
        """(time, blocks in use) at every decision; kept only with `timeline` (it grows with
        every event: a run of many steps keeps `max_used_blocks` alone)."""
        self._timeline = timeline

    # --- public -----------------------------------------------------------------------------

    def stats(self) -> EngineLoad:
        return EngineLoad(
            self.num_blocks * BLOCK,
            self.free_blocks * BLOCK,
            len(self.running),
            len(self.waiting),
            self.preemptions,
            self.recomputed_tokens,
            self.generated_tokens,
        )

    def submit(self, req: Request, now: float) -> float | None:
        """Queue a request at time `now`; returns a new wake time if the caller must schedule one
        (the previous wake time, if any, is then stale: `version` changed)."""
        self.waiting.append(req)
        if self.wake_at is None:  # idle: decide right now
            return self._set_wake(now, 0, now)
        if self._pending == 0:  # a decision is already due now
            return None
        elapsed = now - self._seg_t0
        if elapsed <= 0.0:  # arrived as the segment starts: re-plan it with this request
            return self._set_wake(self._seg_t0, 0, now) if self._pending > 0 else None
        j = self._steps_to_cover(elapsed)
        if j >= self._pending:
            return None
        return self._set_wake(self._seg_t0 + self._seg_time(j), j, now)

    def boundary(self, now: float) -> list[Request]:
        """Run the steps of the segment up to `now` and decide the next one. Returns the turns
        that completed; afterwards `wake_at` is the next boundary time (None when idle)."""
        if self._pending:
            self._advance(self._pending)
        done = self._pop_finished()
        if self.running and self._need_now() > self.free_blocks:
            self._preempt_until_fit()
        else:
            self._admit()
        self._plan(now)
        return done

    def drop_cache(self, traj: int) -> None:
        """Forget a finished trajectory's cached blocks (they stay free)."""
        entry = self._cache.pop(traj, None)
        if entry is not None:
            self._cached_blocks -= entry[1]

    def forget_prompts(self, prompt_ids: Iterable[str]) -> None:
        """These prompts will not come again (their step is over): forget they were seen."""
        self._prompts_seen.difference_update(prompt_ids)

    # --- segment arithmetic -------------------------------------------------------------------

    def _seg_time(self, j: int) -> float:
        """Time of the first j steps of the segment (prefill is paid in the first step)."""
        if j <= 0:
            return 0.0
        return self._seg_p + j * self._seg_d0 + self._seg_h * j * (j - 1)

    def _steps_to_cover(self, elapsed: float) -> int:
        """Smallest j >= 1 whose end time is at or after `elapsed` (the step in progress)."""
        d0, h, p = self._seg_d0, self._seg_h, self._seg_p
        if h > 0.0:
            b = d0 - h
            j = math.ceil((-b + math.sqrt(max(0.0, b * b - 4 * h * (p - elapsed)))) / (2 * h))
        else:
            j = math.ceil((elapsed - p) / d0)
        j = max(1, j)
        while j > 1 and self._seg_time(j - 1) >= elapsed:
            j -= 1
        while self._seg_time(j) < elapsed:
            j += 1
        return j

    def _set_wake(self, at: float, pending: int, now: float) -> float:
        self._pending = pending
        self.version += 1
        self.wake_at = max(at, now)
        return self.wake_at

    def _d_counts(self) -> list[int]:
        """Running sequences by d = steps until each next needs a block (0 = this step).

        A sequence of phase p = (L - step) % 16 needs its next block after d = -(p + step) % 16
        steps, so the counts are the phase histogram rotated by the step (cached per step).
        """
        if self._counts_step != self.step:
            h, s = self._phase_hist, self.step % BLOCK
            self._counts = [h[(-k - s) % BLOCK] for k in range(BLOCK)]
            self._counts_step = self.step
        return self._counts

    def _need_now(self) -> int:
        return self._d_counts()[0]

    def _max_steps_fitting(self) -> int:
        """Most steps the running set can take before the free blocks run out.

        Blocks needed over j = 16q + r steps are q * n + (sequences with d < r), since every
        sequence needs exactly one block per 16 steps, the first after d steps.
        """
        n = len(self.running)
        q, left = divmod(self.free_blocks, n)
        counts = self._d_counts()
        r, cum = 0, 0
        while r < BLOCK - 1 and cum + counts[r] <= left:
            cum += counts[r]
            r += 1
        return BLOCK * q + r

    def _blocks_over(self, j: int) -> int:
        q, r = divmod(j, BLOCK)
        return q * len(self.running) + sum(self._d_counts()[:r])

    # --- state changes ------------------------------------------------------------------------

    def _advance(self, j: int) -> None:
        self.free_blocks -= self._blocks_over(j)
        if self.free_blocks < 0:
            raise AssertionError(f"engine {self.engine_id} over-allocated its KV blocks")
        self._trim_cache()
        self.busy_s += self._seg_time(j)
        self.step += j
        self.generated_tokens += j * len(self.running)
        self._prefill_pending = 0
        self._record_kv(self._seg_t0 + self._seg_time(j))

    def _pop_finished(self) -> list[Request]:
        done = []
        heap = self._finish_heap
        while heap and heap[0][0] <= self.step:
            _, admit_no, req = heapq.heappop(heap)
            if req.admit_no != admit_no or admit_no not in self.running:
                continue  # stale entry of a preempted (and maybe re-admitted) request
            del self.running[admit_no]
            length = self._untrack(req)
            self.free_blocks += -(-length // BLOCK)
            if not req.final:
                self._cache[req.traj] = (length, -(-length // BLOCK))
                self._cached_blocks += -(-length // BLOCK)
            done.append(req)
        return done

    def _untrack(self, req: Request) -> int:
        """Drop a request (already out of `running`) from the aggregates; returns its length L."""
        self._phase_hist[req.off % BLOCK] -= 1
        self._counts_step = -1
        self._sum_off -= req.off
        return req.off + self.step

    def _preempt_until_fit(self) -> None:
        while self.running and self._need_now() > self.free_blocks:
            _, victim = self.running.popitem()
            length = self._untrack(victim)
            self.free_blocks += -(-length // BLOCK)
            victim.context = length
            victim.remaining = victim.target - self.step
            victim.recompute = True
            self.waiting.appendleft(victim)
            self.preemptions += 1
            self.recomputed_tokens += length

    def _admit(self) -> None:
        need_now = self._need_now() if self.running else 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            blocks = -(-req.context // BLOCK)
            first_need = 1 if req.context % BLOCK == 0 else 0
            if blocks + first_need > self.free_blocks - need_now:
                break
            self.waiting.popleft()
            self._prefill_pending += self._prefill_for(req)
            self.free_blocks -= blocks
            need_now += first_need
            self._admit_counter += 1
            req.admit_no = self._admit_counter
            req.off = req.context - self.step
            req.target = self.step + req.remaining
            self.running[req.admit_no] = req
            self._phase_hist[req.off % BLOCK] += 1
            self._counts_step = -1
            self._sum_off += req.off
            heapq.heappush(self._finish_heap, (req.target, req.admit_no, req))
        self._trim_cache()

    def _prefill_for(self, req: Request) -> int:
        """New tokens this admission must prefill (the rest come from the prefix cache)."""
        cached = 0
        entry = self._cache.pop(req.traj, None)
        if entry is not None:
            self._cached_blocks -= entry[1]
            if not req.recompute:
                cached = entry[0]
        elif req.first_turn and not req.recompute and req.prompt_id in self._prompts_seen:
            cached = req.prompt_tokens
        self._prompts_seen.add(req.prompt_id)
        req.recompute = False
        self.cache_hit_tokens += cached
        self.prefill_tokens += req.context - cached
        return req.context - cached

    def _trim_cache(self) -> None:
        while self._cached_blocks > self.free_blocks:
            _, (_, blocks) = self._cache.popitem(last=False)
            self._cached_blocks -= blocks

    def _record_kv(self, t: float) -> None:
        used = self.num_blocks - self.free_blocks
        if used > self.max_used_blocks:
            self.max_used_blocks = used
        if self._timeline:
            self.kv_timeline.append((t, used))

    def _plan(self, now: float) -> None:
        """Set up the next segment from `now`: run until a turn ends or the blocks run out."""
        self._record_kv(now)
        n = len(self.running)
        if n == 0:
            if self.waiting:  # everything was preempted: admit again on the next decision
                self._set_wake(now, 0, now)
            else:
                self.wake_at = None
                self._pending = 0
                self.version += 1
            return
        heap = self._finish_heap
        while heap[0][2].admit_no != heap[0][1] or heap[0][1] not in self.running:
            heapq.heappop(heap)  # stale entries of preempted requests
        steps = min(heap[0][0] - self.step, self._max_steps_fitting())
        cost = self.cost
        context = self._sum_off + n * self.step
        self._seg_t0 = now
        self._seg_d0 = (
            cost.step_overhead_s + cost.per_seq_s * n + cost.per_context_token_s * context
        )
        self._seg_h = cost.per_context_token_s * n / 2.0
        self._seg_p = cost.per_prefill_token_s * self._prefill_pending
        self._set_wake(now + self._seg_time(steps), steps, now)
