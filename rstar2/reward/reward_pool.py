"""The reward pool: score responses against references with a few verifier processes.

    async with open_reward_pool(RewardConfig()) as pool:
        result = await pool.score(response, "42")   # RewardResult(reward, extracted, status)

Scoring, in order (`decide_locally` is the synchronous part, tested directly):
1. extract the last boxed answer; none -> reward 0, status "no_answer" (no worker involved);
2. the normaliser proves it equal to the reference -> reward 1, status "ok" (fast path);
3. otherwise math-verify decides in a worker process: "equal" -> 1, "unequal" -> 0 (status
   "ok"); the worker's alarm fired, or the worker did not answer within `timeout_s +
   kill_grace_s` -> 0, status "timeout" (an unresponsive worker is killed and a replacement
   starts in the background); the worker failed on the input -> 0, status "error".
With `extra_latency_s` (what-if profiling, see `RewardConfig`), every extracted answer first
keeps an idle worker busy for that long (`hold_a_worker`), whichever way it is then decided.

Many tasks may call `score` at once: idle workers sit in a memory channel, a caller takes one,
uses it and gives it back, so at most `workers` verifications run and the rest wait in line. A
worker found dead (killed from outside, crashed) is replaced and the request retried once on
another worker. Works under asyncio and trio (anyio).

What it does not do: zero the reward of truncated rollouts (the caller knows the finish
reason), or cache results.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rstar2.reward.extraction import extract_answer
from rstar2.reward.normalizer import answers_match
from rstar2.reward.reward_config import RewardConfig
from rstar2.reward.verifier_process import VerifierDied, VerifierProcess
from rstar2.wire import RewardResult, VerifyReply, VerifyRequest

log = logging.getLogger(__name__)

REPLACE_ATTEMPTS = 3


class RewardPoolError(RuntimeError):
    """The pool cannot verify anything: no worker could be started."""


def decide_locally(response: str, reference: str, fast_path: bool = True) -> RewardResult | str:
    """The result when no worker is needed, else the extracted answer to send to one."""
    if not isinstance(response, str) or not isinstance(reference, str):
        raise TypeError(
            f"response and reference must be str, got {type(response).__name__} "
            f"and {type(reference).__name__}"
        )
    if not reference.strip():
        raise ValueError("reference answer is empty")
    extracted = extract_answer(response)
    if extracted is None:
        return RewardResult(0.0, None, "no_answer")
    if fast_path and answers_match(extracted, reference):
        return RewardResult(1.0, extracted, "ok")
    return extracted


def result_from_reply(extracted: str, reply: VerifyReply) -> RewardResult:
    """Map a worker's reply to the reward result."""
    if reply.status == "equal":
        return RewardResult(1.0, extracted, "ok")
    if reply.status == "unequal":
        return RewardResult(0.0, extracted, "ok")
    if reply.status == "timeout":
        return RewardResult(0.0, extracted, "timeout", reply.message)
    return RewardResult(0.0, extracted, "error", reply.message or f"status {reply.status!r}")


class RewardPool:
    """Use through `open_reward_pool`; `score` is safe to call from many tasks at once."""

    def __init__(self, cfg: RewardConfig, tg: TaskGroup) -> None:
        self.cfg = cfg
        self._tg = tg
        self._idle_send: MemoryObjectSendStream[VerifierProcess]
        self._idle_recv: MemoryObjectReceiveStream[VerifierProcess]
        self._idle_send, self._idle_recv = anyio.create_memory_object_stream(cfg.workers)
        self._workers: dict[int, VerifierProcess] = {}
        self._ids = itertools.count(1)
        self._closing = False

    async def score(self, response: str, reference: str) -> RewardResult:
        """Reward 1.0 when the response's final answer matches `reference`, else 0.0."""
        local = decide_locally(response, reference, self.cfg.fast_path)
        answered = not (isinstance(local, RewardResult) and local.extracted is None)
        if answered and self.cfg.extra_latency_s > 0:
            await self.hold_a_worker(self.cfg.extra_latency_s)
        if isinstance(local, RewardResult):
            return local
        for attempt in (1, 2):
            try:
                reply = await self._verify(local, reference)
            except VerifierDied as e:
                log.warning("verifier died (attempt %d): %s", attempt, e)
                message = str(e)
                continue
            if reply is None:
                limit = self.cfg.timeout_s + self.cfg.kill_grace_s
                return RewardResult(0.0, local, "timeout", f"no answer within {limit:g}s")
            return result_from_reply(local, reply)
        return RewardResult(0.0, local, "error", message)

    async def hold_a_worker(self, seconds: float) -> None:
        """Keep one idle worker from other callers for `seconds` (a slower verification)."""
        try:
            worker = await self._idle_recv.receive()
        except anyio.EndOfStream:
            raise RewardPoolError("no verifier worker is left") from None
        try:
            await anyio.sleep(seconds)
        finally:
            self._idle_send.send_nowait(worker)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring and tests)."""
        return [w.pid for w in self._workers.values() if w.alive]

    async def _verify(self, extracted: str, reference: str) -> VerifyReply | None:
        """One worker round trip; None when the hard timeout expired (the worker is replaced)."""
        try:
            worker = await self._idle_recv.receive()
        except anyio.EndOfStream:
            raise RewardPoolError("no verifier worker is left") from None
        request = VerifyRequest(next(self._ids), extracted, reference, self.cfg.timeout_s)
        reusable = False
        try:
            with anyio.move_on_after(self.cfg.timeout_s + self.cfg.kill_grace_s):
                reply = await worker.request(request)
                reusable = True
                return reply
            log.warning("verifier %d did not answer in time; killing it", worker.pid)
            return None
        finally:
            if reusable:
                self._idle_send.send_nowait(worker)
            else:  # dead, timed out or cancelled mid-request: its stream is unusable
                self._tg.start_soon(self._replace, worker)

    async def _replace(self, old: VerifierProcess) -> None:
        self._workers.pop(old.pid, None)
        await old.kill()
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            if self._closing:
                return
            try:
                await self._add_worker()
                return
            except VerifierDied as e:
                log.error("could not start a verifier (attempt %d): %s", attempt, e)
        if not self._workers:
            self._idle_send.close()  # waiting callers get RewardPoolError, not a hang

    async def _add_worker(self) -> None:
        worker = await VerifierProcess.start(self.cfg.memory_mb, self.cfg.start_timeout_s)
        if self._closing:
            await worker.kill()
            return
        self._workers[worker.pid] = worker
        self._idle_send.send_nowait(worker)

    async def _start(self) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(self.cfg.workers):
                tg.start_soon(self._add_worker)

    async def _close(self) -> None:
        self._closing = True
        with anyio.CancelScope(shield=True):
            for worker in list(self._workers.values()):
                await worker.kill()
        self._workers.clear()


@asynccontextmanager
async def open_reward_pool(cfg: RewardConfig | None = None) -> AsyncIterator[RewardPool]:
    """Start `cfg.workers` verifier processes; kill them all on exit."""
    cfg = cfg or RewardConfig()
    cfg.validate()
    async with anyio.create_task_group() as tg:
        pool = RewardPool(cfg, tg)
        try:
            try:
                await pool._start()
            except VerifierDied as e:
                raise RewardPoolError(str(e)) from None
            log.info("reward pool ready: %d verifier workers", cfg.workers)
            yield pool
        finally:
            await pool._close()
            tg.cancel_scope.cancel()
