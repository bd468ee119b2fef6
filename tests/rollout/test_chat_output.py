"""What `rstar2 chat` prints for each event and at the end."""

from __future__ import annotations

import io

from rstar2.commands.chat_run import EventPrinter, print_summary
from rstar2.rollout.agent_loop import ToolCallEvent, ToolResultEvent, TurnEvent
from rstar2.rollout.tool_call import MalformedCall, ToolCall
from rstar2.rollout.trajectory import TurnStop
from tests.trajectories import trajectory


def test_events_are_printed_in_sections():
    out = io.StringIO()
    printer = EventPrinter(out)
    printer(TurnEvent(turn=0, text="let me compute<tool_call>...</tool_call>", stop=TurnStop.CALL))
    printer(ToolCallEvent(turn=0, call=ToolCall("print(37*91)", "7\n")))
    printer(ToolResultEvent(turn=0, text="Tool call success\n3367\n", failed=False))
    printer(ToolCallEvent(turn=1, call=MalformedCall('missing "name"')))
    text = out.getvalue()
    assert "=== assistant (turn 1) ===\nlet me compute" in text
    assert (
        "=== tool call: execute_python_code_with_standard_io ===\nprint(37*91)\n--- stdin ---\n7\n"
        in text
    )
    assert "=== tool result ===\nTool call success\n3367\n" in text
    assert '=== tool call (malformed) ===\nmissing "name"' in text


def test_summary_names_the_final_answer_and_finish():
    traj = trajectory(
        token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], prompt_len=1,
        response_text="<answer>The answer is \\boxed{3367}</answer>", turns=2, tool_calls=1,
    )  # fmt: skip
    out = io.StringIO()
    print_summary(traj, out)
    assert out.getvalue().startswith("=== final answer ===\n3367\n")
    assert (
        "finish: answer | turns: 2 | tool calls: 1 (0 failed) | response tokens: 2"
        in out.getvalue()
    )
