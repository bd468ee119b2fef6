"""The live scheduler's bookkeeping: a FIFO of waiting trajectories in front of a policy.

`Dispatcher` is the synchronous core of the scheduler actor (the actor only moves messages):

- `submit(batch)` queues a step's trajectories (calling the policy's `prepare` first) and
  returns the ones that can start now, each with its engine;
- `finish(result)` records the engine stats that came back with a finished trajectory,
  releases the trajectory in the policy (`on_finish`) and returns what can start now;
- `route(msg)` answers a rollout worker asking, before a later turn, where it should run
  (`move_turns`): the policy's `assign` for that turn, never held (a running trajectory
  continues on the engine of its previous turn when the policy would hold it).

A trajectory is admitted once, at its first turn, to the rollout worker that owns the engine
the policy chose; that worker runs its agent loop to the end. With `move_turns` the worker asks
`route` before each later turn and, when the answer is another engine, has that engine's
worker generate the turn (the whole context is prefilled there). The queue is strictly FIFO: it stops at
the first trajectory the policy holds back (no overtaking), as the policy interface requires.
A trajectory the policy holds while some engine has nothing in flight goes to that engine, so a
reservation bigger than a whole KV pool cannot deadlock the step. For the KV-aware policy's
"predicted" reservation it passes the running mean of finished
trajectories' lengths (prompt + response) as the prediction, capped at the maximum.

What it does not do: send anything (the actor does), or decide where a trajectory goes (the
policy does).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rstar2.scheduler.policy import Policy, TurnRequest
from rstar2.wire import EngineReport, RolloutTask, TrajectoryResult, TurnRoute


@dataclass
class _Load:
    """An engine's last reported KV state (duck-types `EngineLoad`)."""

    kv_capacity_tokens: int
    kv_free_tokens: int
    running: int
    waiting: int
    preemptions: int

    @classmethod
    def of(cls, msg: EngineReport | TrajectoryResult) -> _Load:
        """The KV figures an engine report or a finished trajectory carries."""
        return cls(
            msg.kv_capacity_tokens, msg.kv_free_tokens, msg.running, msg.waiting, msg.preemptions
        )


class Dispatcher:
    """FIFO admission of trajectories to engines through a scheduling policy."""

    def __init__(self, policy: Policy, max_response_tokens: int) -> None:
        if max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1, got {max_response_tokens}")
        self.policy = policy
        self.max_response_tokens = max_response_tokens
        self.queue: deque[RolloutTask] = deque()
        self.in_flight: dict[str, int] = {}
        self._finished_tokens = 0
        self._finished_count = 0

    def report(self, r: EngineReport) -> None:
        self.policy.on_stats(r.engine, _Load.of(r))

    def submit(self, tasks: list[RolloutTask]) -> list[tuple[int, RolloutTask]]:
        self.policy.prepare([self._request(t) for t in tasks])
        self.queue.extend(tasks)
        return self._admit()

    def finish(self, result: TrajectoryResult) -> list[tuple[int, RolloutTask]]:
        self.in_flight.pop(result.traj_id, None)
        if result.engine >= 0:
            self.policy.on_stats(result.engine, _Load.of(result))
        self.policy.on_finish(result.traj_id)
        self._finished_tokens += len(result.token_ids)
        self._finished_count += 1
        return self._admit()

    def route(self, msg: TurnRoute) -> int:
        """The engine for a later turn of a running trajectory (see the module docstring)."""
        if msg.turn < 1:
            raise ValueError(f"route is for later turns (turn >= 1), got turn {msg.turn}")
        previous = self.in_flight.get(msg.traj_id)
        if previous is None:
            raise ValueError(f"trajectory {msg.traj_id!r} is not in flight")
        if msg.report is not None:
            self.report(msg.report)
        max_total = max(msg.max_total_tokens, msg.context_tokens)
        req = TurnRequest(
            traj_id=msg.traj_id,
            prompt_id=msg.prompt_id,
            turn=msg.turn,
            context_tokens=msg.context_tokens,
            prompt_tokens=msg.prompt_tokens,
            max_total_tokens=max_total,
            predicted_total_tokens=self._predicted(msg.prompt_tokens, max_total),
        )
        engine = self.policy.assign(req)
        if engine is None:
            engine = previous
        self.in_flight[msg.traj_id] = engine
        return engine

    def _admit(self) -> list[tuple[int, RolloutTask]]:
        started = []
        while self.queue:
            task = self.queue[0]
            engine = self.policy.assign(self._request(task))
            if engine is None:
                engine = self._idle_engine()
            if engine is None:
                break
            self.queue.popleft()
            self.in_flight[task.traj_id] = engine
            started.append((engine, task))
        return started

    def _idle_engine(self) -> int | None:
        """An engine with no trajectory in flight, for a task the policy holds back.

        A reservation larger than an engine's whole KV pool would otherwise wait forever; an
        idle engine takes it anyway (the engine truncates it at its context limit). This only
        fires when some engine is completely idle, so it never overrides a busy engine's KV
        budget.
        """
        busy = set(self.in_flight.values())
        for engine in range(self.policy.num_engines):
            if engine not in busy:
                return engine
        return None

    def _request(self, task: RolloutTask) -> TurnRequest:
        budget = task.max_response_tokens or self.max_response_tokens
        prompt = len(task.prompt_ids)
        predicted = self._predicted(prompt, prompt + budget)
        return TurnRequest(
            traj_id=task.traj_id,
            prompt_id=task.prompt_id,
            turn=0,
            context_tokens=prompt,
            prompt_tokens=prompt,
            max_total_tokens=prompt + budget,
            predicted_total_tokens=predicted,
        )

    def _predicted(self, prompt: int, max_total: int) -> int | None:
        """The running mean length of finished trajectories, within (prompt, max_total]."""
        if not self._finished_count:
            return None
        mean = self._finished_tokens / self._finished_count
        return int(min(max(mean, prompt + 1), max_total))
