"""The embedded default task: seeded arithmetic problems and SFT traces in the chat format."""

from rstar2.tasks.arithmetic import (
    ArithmeticProblem,
    TaskConfig,
    evaluate,
    generate_problems,
    split_of,
    write_jsonl,
)
from rstar2.tasks.traces import (
    TOOL_NAME,
    TOOL_SCHEMA,
    Message,
    build_trace,
    build_traces,
    tool_call_text,
    tool_error_text,
    tool_success_text,
)

__all__ = [
    "TOOL_NAME",
    "TOOL_SCHEMA",
    "ArithmeticProblem",
    "Message",
    "TaskConfig",
    "build_trace",
    "build_traces",
    "evaluate",
    "generate_problems",
    "split_of",
    "tool_call_text",
    "tool_error_text",
    "tool_success_text",
    "write_jsonl",
]
