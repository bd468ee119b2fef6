"""The trajectories of a simulated run's steps (`RunSteps`), made when a step is released, and
the ids a released step's trajectories carry (`step_specs`).

What it does not do: generate the trajectories (`sim/workload.py`, `sim/config.run_steps`) or
release them (`sim/training_run.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from sim.workload import TrajectorySpec


def _reach(spec: TrajectorySpec) -> int:
    """Tokens a trajectory may reach: its prompt and its whole response budget."""
    return spec.prompt_tokens + spec.max_response_tokens


class RunSteps:
    """The trajectories of a run's steps, made when they are asked for: ``steps[t - 1]`` calls
    ``make(t)``, a pure function of t, and nothing is kept, so a run holds only the steps it has
    released and not yet finished. Built with every step made once (and dropped) for what must
    be known before the run starts: each step's size (the progress total) and the longest
    trajectory (the cluster's shape and the KV check)."""

    def __init__(self, make: Callable[[int], Sequence[TrajectorySpec]], count: int) -> None:
        if count < 1:
            raise ValueError(f"a run needs at least one step, got {count}")
        sizes, longest = [], None
        for t in range(1, count + 1):
            step = make(t)
            if not step:
                raise ValueError(f"step {t} has no trajectory")
            sizes.append(len(step))
            top = max(step, key=_reach)
            if longest is None or _reach(top) > _reach(longest[1]):
                longest = (t, top)
        assert longest is not None
        self._make = make
        self.sizes = tuple(sizes)
        """Trajectories of each step."""
        self.longest = longest
        """(step, trajectory): the first trajectory that may reach `max_len`."""

    @classmethod
    def of(cls, steps: Sequence[Sequence[TrajectorySpec]]) -> RunSteps:
        """Steps already made (all of them held: for tests and small runs)."""
        return cls(lambda t: steps[t - 1], len(steps))

    @property
    def max_len(self) -> int:
        """The most tokens any trajectory of the run may reach."""
        return _reach(self.longest[1])

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> Sequence[TrajectorySpec]:
        if not 0 <= index < len(self.sizes):
            raise IndexError(f"step index {index} outside 0..{len(self.sizes) - 1}")
        return self._make(index + 1)

    def __iter__(self) -> Iterator[Sequence[TrajectorySpec]]:
        return (self[i] for i in range(len(self)))


def step_specs(t: int, step: Sequence[TrajectorySpec]) -> list[TrajectorySpec]:
    """Step t's trajectories as the run releases them, ids prefixed by the step (``"3/p0-r1"``),
    so that a replayed step's trajectories and prompts are new to the engines and the core."""
    return [
        replace(spec, traj_id=f"{t}/{spec.traj_id}", prompt_id=f"{t}/{spec.prompt_id}")
        for spec in step
    ]
