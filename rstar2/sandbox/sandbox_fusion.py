"""SandboxFusion's `POST /run_code` (the service verl's sandbox tool calls), for Python.

SandboxFusion (github bytedance/SandboxFusion) takes `{code, language, compile_timeout?,
run_timeout?, memory_limit_MB?, stdin?, files?, fetch_files?}` and answers `{status, message,
compile_result, run_result, executor_pod_name, files}`, where `status` is "Success", "Failed"
(the code failed or timed out) or "SandboxError" (the service failed), and `run_result` is
`{status, execution_time, return_code, stdout, stderr}` with `status` "Finished",
"TimeLimitExceeded" or "Error". verl (`verl/utils/reward_score/sandbox_fusion/utils.py`) posts
exactly `{compile_timeout, run_timeout, code, stdin, memory_limit_MB, language, files: {},
fetch_files: []}` and reads `status`, `compile_result` and `run_result`'s five fields; it
retries a 504 (and only a 504), so that is the status `http_front.py` gives when overloaded.

This module decides, without I/O:
- `parse_run_code`: the body -> a typed request, or a `Refusal` (invalid JSON, a wrong field,
  a language other than "python", files to upload or fetch, a timeout <= 0, code or stdin over
  the sandbox's size limits);
- `exec_request`: `run_timeout` becomes the request's wall-clock limit and `memory_limit_MB`
  its address-space allowance, both capped by the sandbox's config exactly as on the ZeroMQ
  service (left out, or <= 0 for memory, they take the sandbox's defaults); `compile_timeout`
  has nothing to time for Python and is ignored; the code runs as a script
  (`code_judge.as_script`: no trailing expression is displayed, as with `python FILE`);
- `run_code_response`: an `ExecResult` -> SandboxFusion's response. `ok` is "Success";
  `error`, `memory`, `output_limit` and a `killed` that is the code's own are "Failed" with a
  "Finished" run and its non-zero return code; `timeout` is "Failed" with "TimeLimitExceeded";
  a failure of the sandbox itself (`infra` set) is "SandboxError" with an "Error" run and the
  reason in `message`; `output_limit` says in `message` that the output cap was hit. A result
  to retry later (`executor.RETRY_LATER`: "queue_full", "unavailable") never gets here: the
  front answers it with the overload status instead.

What it does not do: other languages, `/run_jupyter`, files, or SandboxFusion's dataset routes.
"""

from __future__ import annotations

import msgspec

from rstar2.sandbox.code_judge import SCRIPT_END, as_script, decode_body
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.http_gate import Refusal
from rstar2.wire import ExecRequest, ExecResult


class RunCodeRequest(msgspec.Struct):
    code: str
    language: str
    compile_timeout: float | None = None
    run_timeout: float | None = None
    memory_limit_MB: int | None = None  # noqa: N815 (SandboxFusion's field name)
    stdin: str | None = None
    files: dict[str, str | None] = {}
    fetch_files: list[str] = []


class CommandRunResult(msgspec.Struct):
    status: str
    execution_time: float | None
    return_code: int | None
    stdout: str | None
    stderr: str | None


class RunCodeResponse(msgspec.Struct):
    status: str
    message: str
    compile_result: CommandRunResult | None
    run_result: CommandRunResult | None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


def parse_run_code(body: bytes, cfg: SandboxConfig) -> RunCodeRequest | Refusal:
    """The body of `/run_code`, or why it is refused."""
    req = decode_body(body, RunCodeRequest)
    if isinstance(req, Refusal):
        return req
    if req.language != "python":
        return Refusal(
            422, f'language "{req.language}" is not served: this sandbox runs Python only'
        )
    if req.files or req.fetch_files:
        return Refusal(422, "files and fetch_files are not supported: send them inside the code")
    if req.run_timeout is not None and not req.run_timeout > 0:
        return Refusal(422, f"run_timeout must be > 0, got {req.run_timeout}")
    if len(req.code) > cfg.max_code_bytes - len(SCRIPT_END):
        limit = cfg.max_code_bytes - len(SCRIPT_END)
        return Refusal(413, f"code of {len(req.code)} chars exceeds {limit}")
    if req.stdin is not None and len(req.stdin) > cfg.max_stdin_bytes:
        return Refusal(413, f"stdin of {len(req.stdin)} chars exceeds {cfg.max_stdin_bytes}")
    return req


def exec_request(req: RunCodeRequest, request_id: str) -> ExecRequest:
    """What the executor runs for `req` (the executor caps the limits: `limits_for`)."""
    memory = req.memory_limit_MB if req.memory_limit_MB and req.memory_limit_MB > 0 else None
    return ExecRequest(
        id=request_id,
        code=as_script(req.code),
        stdin=req.stdin or "",
        timeout_s=req.run_timeout,
        memory_mb=memory,
    )


def run_code_response(result: ExecResult) -> RunCodeResponse:
    """SandboxFusion's answer for an executor result (not for `RETRY_LATER`: see above)."""
    if result.infra:
        run = CommandRunResult("Error", result.wall_s, None, result.stdout, result.stderr)
        message = f"{result.infra}: {result.stderr}".rstrip(": ")
        return RunCodeResponse("SandboxError", message, None, run)
    if result.status == "ok":
        run = CommandRunResult("Finished", result.wall_s, 0, result.stdout, result.stderr)
        return RunCodeResponse("Success", "", None, run)
    if result.status == "timeout":
        run = CommandRunResult(
            "TimeLimitExceeded", result.wall_s, None, result.stdout, result.stderr
        )
        return RunCodeResponse("Failed", "", None, run)
    # the code failed: a non-zero return code whatever the exit (1 when the child exited 0
    # but was still judged a failure, e.g. killed for its output size after exiting)
    code = result.exit_code if result.exit_code != 0 else 1
    run = CommandRunResult("Finished", result.wall_s, code, result.stdout, result.stderr)
    message = ""
    if result.status == "output_limit":
        message = (
            "output limit hit: the code wrote more than the sandbox's max_output_bytes and was "
            "stopped; stdout and stderr are cut there"
        )
    return RunCodeResponse("Failed", message, None, run)
