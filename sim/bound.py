"""A lower bound on the makespan of one rollout step, valid for every scheduling policy.

Two bounds, the larger of which is returned (cost model ``a + b*batch + c*context + p*prefill``
per step, E engines of K KV tokens and at most S running sequences each):

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
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.cost import CostModel
from sim.workload import TrajectorySpec


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


def lower_bound(
    workload: Sequence[TrajectorySpec],
    cost: CostModel,
    num_engines: int,
    kv_tokens: int,
    max_num_seqs: int,
) -> float:
    """max(critical path, total work / engines); see the module docstring."""
    if not workload:
        raise ValueError("empty workload")
    longest, tokens, sum_l = 0.0, 0, 0.0
    prompt_min: dict[str, int] = {}
    for spec in workload:
        prompt_min[spec.prompt_id] = min(
            spec.prompt_tokens, prompt_min.get(spec.prompt_id, spec.prompt_tokens)
        )
    prefill = sum(prompt_min.values())
    for spec in workload:
        path, n, s = _trajectory_path(spec, cost)
        longest = max(longest, path)
        tokens += n
        sum_l += s
        prefill += sum(t.tool_tokens for t in spec.turns)
    steps = max(tokens / max_num_seqs, sum_l / kv_tokens)
    work = (
        cost.step_overhead_s * steps
        + cost.per_seq_s * tokens
        + cost.per_context_token_s * sum_l
        + cost.per_prefill_token_s * prefill
    )
    return max(longest, work / num_engines)
