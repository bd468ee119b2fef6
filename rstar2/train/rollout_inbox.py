"""The rollout inbox: scored trajectories sorted into the rollouts they belong to.

The learner actor's rollouts are `RollOut` commands (`rstar2.train.run_commands`): a batch of
tasks sent on ``tasks`` whose scored trajectories come back one by one on ``scored``. In
synchronous RL one rollout is in flight at a time; in asynchronous RL (`rl.max_staleness > 0`)
the rollouts of later steps are submitted ahead and their trajectories arrive while the shell
waits for another's, or while the learner updates (they wait in the bus until read). The inbox
keeps each submitted rollout's expected trajectory ids and the results received so far, so
whichever rollout the shell waits for, every message it reads lands where it belongs.

A trajectory id names its rollout (`kind/step/prompt/sample`, unique per run), so the inbox
keys rollouts by (kind, step). A message no submitted rollout expects (one of a rollout the
run abandoned, or a duplicate) is a stray: `deliver` says so and drops it.

What it does not do: send or receive (the learner actor), or decide what to roll out (the
controller).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rstar2.wire import RolloutTask, TrajectoryResult

Key = tuple[str, int]
"""(kind, step) of a rollout."""


@dataclass
class _Pending:
    wanted: set[str]
    results: list[TrajectoryResult] = field(default_factory=list)


class RolloutInbox:
    def __init__(self) -> None:
        self._pending: dict[Key, _Pending] = {}
        self._owner: dict[str, Key] = {}

    def expect(self, key: Key, tasks: list[RolloutTask]) -> None:
        """A rollout was submitted: collect its trajectories."""
        if key in self._pending:
            raise ValueError(f"rollout {key} submitted twice")
        self._pending[key] = _Pending({t.traj_id for t in tasks})
        for t in tasks:
            self._owner[t.traj_id] = key

    def expects(self, key: Key) -> bool:
        """Whether the rollout was submitted and not yet taken."""
        return key in self._pending

    def deliver(self, result: TrajectoryResult) -> bool:
        """File a scored trajectory with its rollout; False for a stray (dropped)."""
        key = self._owner.get(result.traj_id)
        if key is None or result.kind != key[0]:
            return False
        pending = self._pending[key]
        pending.wanted.discard(result.traj_id)
        del self._owner[result.traj_id]
        pending.results.append(result)
        return True

    def complete(self, key: Key) -> bool:
        """Every trajectory of the rollout has arrived."""
        return not self._pending[key].wanted

    def take(self, key: Key) -> list[TrajectoryResult]:
        """The complete rollout's results, in arrival order; the inbox forgets it."""
        if not self.complete(key):
            raise ValueError(f"rollout {key} taken with {len(self._pending[key].wanted)} missing")
        return self._pending.pop(key).results

    def in_flight(self) -> list[Key]:
        """Rollouts submitted and not yet taken."""
        return list(self._pending)
