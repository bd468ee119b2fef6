"""The agent loop's tool path against the real sandbox executor (scripted model turns)."""

from __future__ import annotations

import json

import pytest

from rstar2.rollout.agent_loop import run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import open_executor
from tests.rollout.fakes import CharTokenizer, ScriptedEngine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOK = CharTokenizer()
PROMPT = TOK.encode("<|im_start|>user\nWhat is 37*91?<|im_end|>\n<|im_start|>assistant\n")


def call(code: str, stdin: str = "") -> str:
    args = {"code": code, "input": stdin}
    return f"<tool_call>{json.dumps({'name': 'execute_python_code_with_standard_io', 'arguments': args})}</tool_call>"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the executor's own tests cover trio; one zygote start is enough here


async def test_real_executor_answers_success_error_and_timeout():
    scripts = [
        call("print(37*91)"),
        call("print(int(input()) * 2)", "21\n"),
        call("1/0"),
        call("while True: pass"),
        "<answer>\\boxed{3367}</answer><|im_end|>",
    ]
    engine = ScriptedEngine(TOK, {"p/0": scripts})
    cfg = RolloutConfig(tool_timeout_s=1.0, tool_wait_s=30.0, tool_show_time=False)
    async with open_executor(SandboxConfig(concurrency=2)) as ex:
        traj = await run_trajectory(engine, ex, TOK, PROMPT, cfg, prompt_id="p", sample=0)
    text = traj.response_text
    assert "<tool_response>\nTool call success\n3367\n\n</tool_response>" in text
    assert "<tool_response>\nTool call success\n42\n\n</tool_response>" in text
    assert "Tool call failure\nerror\n" in text and "ZeroDivisionError" in text
    assert "Tool call failure\ntimeout\n" in text
    assert (traj.tool_calls, traj.tool_errors, traj.tool_timeouts) == (4, 1, 1)
    assert traj.finish_reason == "answer"
