"""The state machine that builds one rollout's record turn by turn (the record, `Trajectory`,
is declared with the messages in `rstar2.wire`: it travels inside `TrajectoryResult`).

`TrajectoryState` is plain synchronous logic, tested without an engine: it accumulates token
ids, the loss mask (1 for sampled tokens, 0 for prompt and forced/tool tokens), logprobs (0.0
where masked), turn and tool counters, and decides after every turn whether the rollout goes on
(a tool call to answer) or ends, and why (the vocabulary: `rstar2.finish_reason`):

- "answer":       a turn ended without a tool call and contains an `<answer>` tag;
- "no_tool_call": a turn ended without a tool call and without an `<answer>` tag;
- "budget":       the one shared token budget ran out (model or tool tokens);
- "turns":        a turn ended in a tool call at the assistant-turn limit (call not executed);
- "abort":        the engine aborted the request;
- "prompt_too_long": the prompt leaves no room under the context limit, so no turn was asked
                  (`unfit_trajectory`; the state machine never sees such a rollout).

Counters: `tool_calls` counts every call answered (malformed ones included); `tool_errors`
and `tool_timeouts` are disjoint: a failed call that timed out counts in `tool_timeouts`, any
other failure (malformed, error, memory, ...) in `tool_errors`. So RoC's
p_err = (tool_errors + tool_timeouts) / tool_calls (rstar2/rl/penalty.py reads them so).

`infra_failure` is empty unless a tool call failed for a reason outside the model's code (its
`ExecResult.infra`, e.g. a full sandbox queue or a dead sandbox): then "tool:<reason>" of the
first such call. The rollout goes on (the model reads the failure and may retry, as with any
failed call, and the call counts in `tool_errors`/`tool_timeouts` like any other), but RL does
not train on it (`rstar2.rl.resampling`).

What it does not do: talk to the engine or the executor, or tokenise (see agent_loop.py).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from rstar2.format_markers import ANSWER
from rstar2.wire import Trajectory


class TurnStop(enum.Enum):
    """How the engine ended one assistant turn."""

    CALL = "call"  # last token is </tool_call>
    END = "end"  # last token ends the turn (<|im_end|>, <|endoftext|>)
    LENGTH = "length"  # max_tokens reached (the shared budget)
    ABORT = "abort"  # the engine aborted the request


def classify_stop(
    token_ids: Sequence[int], finish_reason: str, call_end_id: int, end_ids: frozenset[int]
) -> TurnStop:
    """Map an engine result onto the loop's view of how the turn ended."""
    if finish_reason == "abort":
        return TurnStop.ABORT
    last = token_ids[-1] if token_ids else None
    if last == call_end_id:
        return TurnStop.CALL
    if last in end_ids:
        return TurnStop.END
    if finish_reason == "length":
        return TurnStop.LENGTH
    # "stop" on a token we did not ask for: treat the turn as ended by the model.
    return TurnStop.END


def count_answer_tags(text: str) -> int:
    """Number of `<answer>` opening tags in model-written text."""
    return text.count(ANSWER)


def unfit_trajectory(prompt_ids: Sequence[int], prompt_id: str, sample: int) -> Trajectory:
    """The record of a rollout whose prompt does not fit the context: no turns, no response,
    finish reason "prompt_too_long" (scored 0 like any truncated rollout)."""
    n = len(prompt_ids)
    return Trajectory(
        prompt_id=prompt_id,
        sample=sample,
        token_ids=list(prompt_ids),
        loss_mask=[0] * n,
        logprobs=[0.0] * n,
        prompt_len=n,
        response_text="",
        turns=0,
        tool_calls=0,
        tool_errors=0,
        tool_timeouts=0,
        answer_tags=0,
        finish_reason="prompt_too_long",
    )


class TrajectoryState:
    """The growing token record of one rollout and its stop decisions."""

    def __init__(self, prompt_ids: Sequence[int], budget: int, max_turns: int) -> None:
        if not prompt_ids:
            raise ValueError("prompt_ids must not be empty")
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.token_ids: list[int] = list(prompt_ids)
        self.loss_mask: list[int] = [0] * len(prompt_ids)
        self.tool_latencies: list[float] = []
        """Wall seconds of each turn's tool call so far, by turn (0.0: none)."""
        self.logprobs: list[float] = [0.0] * len(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self.budget = budget
        self.max_turns = max_turns
        self.turns = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.tool_timeouts = 0
        self.answer_tags = 0
        self.finish_reason: str | None = None
        self.awaiting_tool = False
        self.infra_failure = ""
        self.policy_versions: list[int] = []

    @property
    def used(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add_turn(
        self,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        stop: TurnStop,
        answer_tags: int,
        policy_version: int = -1,
    ) -> None:
        """Record one generated turn (mask 1), generated by policy version `policy_version`
        (-1: unknown), and decide: finish, or await a tool response."""
        self._check_open("add_turn")
        if self.awaiting_tool:
            raise RuntimeError("add_turn while a tool response is pending")
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} logprobs")
        if len(token_ids) > self.remaining:
            raise ValueError(f"turn of {len(token_ids)} tokens exceeds the {self.remaining} left")
        self.token_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.logprobs.extend(float(lp) for lp in logprobs)
        self.turns += 1
        self.policy_versions.append(policy_version)
        self.answer_tags += answer_tags
        if stop is TurnStop.ABORT:
            self.finish_reason = "abort"
        elif stop is TurnStop.LENGTH:
            self.finish_reason = "budget"
        elif stop is TurnStop.END:
            self.finish_reason = "answer" if answer_tags > 0 else "no_tool_call"
        elif self.turns >= self.max_turns:
            self.finish_reason = "turns"
        elif self.remaining <= 0:
            self.finish_reason = "budget"
        else:
            self.awaiting_tool = True

    def add_tool_response(
        self,
        token_ids: Sequence[int],
        *,
        failed: bool,
        timed_out: bool,
        infra: str = "",
        latency: float = 0.0,
    ) -> None:
        """Record the forced tokens (mask 0) answering the pending call, cut at the budget.

        `timed_out` implies a failure; it is counted in `tool_timeouts` only. `infra` is the
        result's infrastructure reason (empty: the code's own doing); the first one marks the
        whole rollout (`infra_failure`). `latency`: the call's wall seconds (this turn's).
        """
        self._check_open("add_tool_response")
        if not self.awaiting_tool:
            raise RuntimeError("add_tool_response without a pending tool call")
        self.awaiting_tool = False
        self.tool_calls += 1
        turn = self.turns - 1
        self.tool_latencies.extend([0.0] * (turn + 1 - len(self.tool_latencies)))
        self.tool_latencies[turn] = latency
        self.tool_timeouts += int(timed_out)
        self.tool_errors += int(failed and not timed_out)
        if infra and not self.infra_failure:
            self.infra_failure = f"tool:{infra}"
        kept = list(token_ids[: self.remaining])
        self.token_ids.extend(kept)
        self.loss_mask.extend([0] * len(kept))
        self.logprobs.extend([0.0] * len(kept))
        if self.remaining <= 0:
            self.finish_reason = "budget"

    def abort(self) -> None:
        """End the rollout as aborted (cancelled from outside)."""
        if not self.finished:
            self.awaiting_tool = False
            self.finish_reason = "abort"

    def to_trajectory(self, prompt_id: str, sample: int, response_text: str) -> Trajectory:
        """The finished record. It shares this state's lists: do not touch the state after."""
        if self.finish_reason is None:
            raise RuntimeError("to_trajectory before the rollout finished")
        return Trajectory(
            prompt_id=prompt_id,
            sample=sample,
            token_ids=self.token_ids,
            loss_mask=self.loss_mask,
            logprobs=self.logprobs,
            prompt_len=self.prompt_len,
            response_text=response_text,
            turns=self.turns,
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            tool_timeouts=self.tool_timeouts,
            answer_tags=self.answer_tags,
            finish_reason=self.finish_reason,
            infra_failure=self.infra_failure,
            policy_versions=self.policy_versions,
            tool_latencies=[*self.tool_latencies, *[0.0] * (self.turns - len(self.tool_latencies))],
        )

    def _check_open(self, what: str) -> None:
        if self.finished:
            raise RuntimeError(f"{what} after the rollout finished ({self.finish_reason})")
