"""Lower bounds on the makespan of one rollout step.

Cost model ``a + b*batch + c*context + p*prefill`` per step, E engines of K KV tokens and at
most S running sequences each. The lower bound (`bound_parts(...).bound_s`) is valid for every
scheduling policy and is the larger of:

1. Critical path of the slowest trajectory. A sequence gets at most one token per step, and a
   step containing it costs at least ``a + b + c*L`` where L is its own resident length. A turn
   of T tokens starting at context L0 therefore takes at least
   ``T*(a+b) + c*(T*L0 + T*(T-1)/2)``, plus ``p * tool_tokens`` for prefilling the tool output
   that opened the turn (never cached), and tool calls take their latency in between:
   ``path = sum over turns + sum of tool latencies``.
2. Work divided over engines. Summing step costs over all steps of all engines gives
   ``a*steps + b*N + c*sum_L + p*prefill``, where N is the number of generated tokens, sum_L
   the sum over them of the resident length of their own sequence when generated (a lower bound
   on the resident context of their steps), and prefill at least every tool output plus each
   distinct prompt once. Every step holds at most S sequences and at most K resident tokens, so
   ``steps >= max(N / S, sum_L / K)``. Engines work in parallel: ``makespan >= work / E``.

Preemption, recompute, cache misses, idle engines and queueing only add time, so no policy can
beat ``max(path, work / E)``; the property test in tests/sim checks it on random workloads.

Two more figures explain the gap between a policy and that bound when turns do not move
(docs/sim.md, "How tight is the bound"):

- `sticky_bound`: given where each trajectory ran, engine e ran at least as many steps as its
  longest trajectory has tokens (m_e), so its busy time is at least
  ``a*max(m_e, N_e/S, sum_L_e/K) + b*N_e + c*sum_L_e + p*prefill_e``; the makespan is at least
  the largest of these (combine it with the lower bound by max: the critical path may
  be longer).
- `BoundParts.spread_floor_s`: averaging that over engines, any sticky run is at least
  ``a*mean(m_e) + (b*N + c*sum_L + p*prefill)/E``, so ``a*g + variable/E`` when every engine
  serves a trajectory of at least g tokens. A split that does not know the lengths cannot pick
  which engines get the long ones: `spread_tokens` is the g for which an even split (n = N/E
  trajectories per engine, chosen without looking at lengths) puts one of at least g tokens on
  every engine with probability >= 99%. With c trajectories of >= g tokens among the step's T,
  an engine misses all of them with probability ``C(T-c, n) / C(T, n) <= (1 - c/T)^n``; the
  union over engines must stay under 1%: ``E * (1 - c/T)^n <= 0.01``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cost import CostModel
from sim.workload import TrajectorySpec


@dataclass(frozen=True)
class BoundParts:
    """The terms of the lower bound and the spread floor, in seconds unless named otherwise."""

    path_s: float
    """Critical path of the slowest trajectory."""
    steps_per_engine: float
    """Lower bound on decode steps per engine: ``max(N/S, sum_L/K) / E``."""
    step_overhead_s: float
    """a: the fixed cost of one decode step (weight streaming)."""
    variable_s: float
    """``(b*N + c*sum_L + p*prefill) / E``: per-token work per engine, whatever the policy."""
    spread_tokens: int
    """g: an even length-blind split serves a trajectory of >= g generated tokens on every
    engine with probability >= 99% (module docstring); 0 when there is no such g."""

    @property
    def fixed_s(self) -> float:
        """``a * steps_per_engine``: the fixed per-step cost per engine that the bound charges."""
        return self.step_overhead_s * self.steps_per_engine

    @property
    def work_s(self) -> float:
        return self.fixed_s + self.variable_s

    @property
    def bound_s(self) -> float:
        """The lower bound: ``max(path, work / E)``."""
        return max(self.path_s, self.work_s)

    @property
    def spread_floor_s(self) -> float:
        """No sticky run in which every engine serves a trajectory of >= g tokens beats this:
        with probability >= 99%, no even length-blind split does."""
        return max(self.bound_s, self.step_overhead_s * self.spread_tokens + self.variable_s)


def bound_parts(
    workload: Sequence[TrajectorySpec],
    cost: CostModel,
    num_engines: int,
    kv_tokens: int,
    max_num_seqs: int,
) -> BoundParts:
    """The terms of the lower bound and the spread floor; see the module docstring."""
    if not workload:
        raise ValueError("empty workload")
    longest, total, lengths = 0.0, _Work(), []
    for spec in workload:
        path, n, s = _trajectory_path(spec, cost)
        longest = max(longest, path)
        total.add(spec, n, s)
        lengths.append(n)
    lengths.sort(reverse=True)
    steps = max(total.tokens / max_num_seqs, total.sum_l / kv_tokens)
    return BoundParts(
        path_s=longest,
        steps_per_engine=steps / num_engines,
        step_overhead_s=cost.step_overhead_s,
        variable_s=total.variable_s(cost, _distinct_prompt_tokens(workload)) / num_engines,
        spread_tokens=_spread_tokens(lengths, num_engines),
    )


def sticky_bound(
    workload: Sequence[TrajectorySpec],
    cost: CostModel,
    engine_of: Sequence[int],
    num_engines: int,
    kv_tokens: int,
    max_num_seqs: int,
) -> float:
    """A lower bound on a run in which trajectory i ran all its turns on engine `engine_of[i]`:
    the largest engine floor ``a*max(m_e, N_e/S, sum_L_e/K) + variable_e`` (module docstring).
    It can be below the lower bound (a long critical path); callers take the max."""
    if len(engine_of) != len(workload):
        raise ValueError(f"{len(engine_of)} engines given for {len(workload)} trajectories")
    work = [_Work() for _ in range(num_engines)]
    members: list[list[TrajectorySpec]] = [[] for _ in range(num_engines)]
    for spec, e in zip(workload, engine_of, strict=True):
        _, n, s = _trajectory_path(spec, cost)
        work[e].add(spec, n, s)
        members[e].append(spec)
    floors = [
        cost.step_overhead_s * max(w.longest, w.tokens / max_num_seqs, w.sum_l / kv_tokens)
        + w.variable_s(cost, _distinct_prompt_tokens(specs))
        for w, specs in zip(work, members, strict=True)
        if specs
    ]
    return max(floors)


def trajectory_work(spec: TrajectorySpec, cost: CostModel) -> tuple[int, float]:
    """(generated tokens, per-token work in seconds) of one trajectory: ``b*N + c*sum_L +
    p*(prompt + tool output)``, what it adds to its engine's floor besides the fixed cost."""
    _, tokens, sum_l = _trajectory_path(spec, cost)
    work = _Work()
    work.add(spec, tokens, sum_l)
    return tokens, work.variable_s(cost, spec.prompt_tokens)


def _spread_tokens(lengths_desc: Sequence[int], num_engines: int, risk: float = 0.01) -> int:
    """The g of `BoundParts.spread_tokens`, from generated lengths sorted longest first."""
    total = len(lengths_desc)
    per_engine = total // num_engines
    if per_engine == 0:
        return 0
    for count, tokens in enumerate(lengths_desc, start=1):
        if num_engines * (1 - count / total) ** per_engine <= risk:
            return tokens
    return 0


def _trajectory_path(spec: TrajectorySpec, cost: CostModel) -> tuple[float, int, float]:
    """(critical-path seconds, generated tokens, sum of resident lengths) of one trajectory."""
    a_b = cost.step_overhead_s + cost.per_seq_s
    c, p = cost.per_context_token_s, cost.per_prefill_token_s
    path, tokens, sum_l = 0.0, 0, 0.0
    length, new_tool_tokens = spec.prompt_tokens, 0
    for turn in spec.turns:
        t = turn.model_tokens
        turn_l = t * length + t * (t - 1) / 2
        path += t * a_b + c * turn_l + p * new_tool_tokens
        tokens += t
        sum_l += turn_l
        length += t + turn.tool_tokens
        new_tool_tokens = turn.tool_tokens
        path += turn.tool_latency_s
    return path, tokens, sum_l


@dataclass
class _Work:
    """Per-token work of a set of trajectories (one engine's, or the whole step's)."""

    tokens: int = 0
    sum_l: float = 0.0
    tool_tokens: int = 0
    longest: int = 0

    def add(self, spec: TrajectorySpec, tokens: int, sum_l: float) -> None:
        """Count one trajectory of `tokens` generated tokens and `sum_l` resident lengths."""
        self.tokens += tokens
        self.sum_l += sum_l
        self.tool_tokens += sum(t.tool_tokens for t in spec.turns)
        self.longest = max(self.longest, tokens)

    def variable_s(self, cost: CostModel, prompt_tokens: int) -> float:
        return (
            cost.per_seq_s * self.tokens
            + cost.per_context_token_s * self.sum_l
            + cost.per_prefill_token_s * (self.tool_tokens + prompt_tokens)
        )


def _distinct_prompt_tokens(specs: Sequence[TrajectorySpec]) -> int:
    """Each distinct prompt once (at its shortest length): the least prefill it can cost."""
    shortest: dict[str, int] = {}
    for spec in specs:
        shortest[spec.prompt_id] = min(spec.prompt_tokens, shortest.get(spec.prompt_id, 1 << 62))
    return sum(shortest.values())
