"""code-judge's HTTP API (the service rStar2-Agent's released tool calls), as plain functions.

code-judge (github 0xWJ/code-judge) takes a `Submission` (`sub_id`?, `type`, `solution`,
`input`?, `expected_output`?, `options`?) on `POST /run` and `/judge`, and a `BatchSubmission`
(`sub_id`?, `type: "batch"`, `submissions: [...]`, at least one) on `/run/batch`,
`/run/long-batch`, `/judge/batch` and `/judge/long-batch`. It answers a `SubmissionResult`
(`sub_id`, `success`, `run_success`, `cost`, `stdout`, `stderr`, `reason`) per submission; the
`/judge` routes leave out `stdout` and `stderr`. rStar2-Agent's tool posts batches to
`/run/long-batch` and reads `results[i]` `run_success`, `success`, `stdout`, `stderr`, `cost`
and `reason`, re-sending the items whose `reason` is "queue_timeout".

This module decides, without I/O:
- `parse_submission` / `parse_batch`: the body -> typed requests, or a `Refusal` (HTTP status
  and message) for bytes that are not UTF-8 or not JSON (400), a wrong field (422), an empty batch, a language other than Python or
  code over the sandbox's size limits;
- `exec_request`: a submission -> the `ExecRequest` the executor runs (no per-request limits:
  code-judge has none, so the sandbox's defaults apply, as on the ZeroMQ service), run as a
  script (`as_script`): both services run `python FILE`, which shows no trailing expression's
  value, where rstar2's executor runs a notebook-like cell that does;
- `run_result` / `judge_result`: an `ExecResult` -> code-judge's result.

How rstar2's statuses map onto code-judge's `reason`: a timeout is "worker_timeout"; a request
the executor could not queue or had no zygote up for (`infra` "queue_full" or "unavailable",
`executor.RETRY_LATER`) is "queue_timeout", the reason code-judge's clients retry; any other failure of the sandbox itself (`infra` set) is "internal_error"; code
over the size limits is refused before it runs. `run_success` is true only for status `ok`;
`success` also needs `stdout.strip() == expected_output.strip()` when `expected_output` is given.
Unknown request fields are ignored, as code-judge does.

What it does not do: run anything, or serve HTTP (`http_front.py`), or cut `stdout`/`stderr` to
code-judge's 1,000 characters (the sandbox's own output cap applies).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal, TypeVar

import msgspec

from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import RETRY_LATER
from rstar2.sandbox.http_gate import Refusal
from rstar2.wire import ExecRequest, ExecResult

T = TypeVar("T")

SCRIPT_END = "\npass\n"
"""Appended to the code: the cell then ends in a statement, so no value is displayed; line
numbers are unchanged."""

REASONS = ("", "internal_error", "worker_timeout", "queue_timeout", "invalid_input")
"""code-judge's `ResultReason` values."""


class Submission(msgspec.Struct):
    type: Literal["python", "cpp", "math"]
    solution: str
    sub_id: str | None = None
    input: str | None = None
    expected_output: str | None = None
    options: dict[str, str] | None = None


class BatchSubmission(msgspec.Struct):
    submissions: Annotated[list[Submission], msgspec.Meta(min_length=1)]
    type: Literal["batch"] = "batch"
    sub_id: str | None = None


class SubmissionResult(msgspec.Struct):
    """The answer of `/run` and of each item of `/run/batch`."""

    sub_id: str
    success: bool
    run_success: bool
    cost: float
    stdout: str | None
    stderr: str | None
    reason: str


class JudgeResult(msgspec.Struct):
    """The answer of `/judge` and of each item of `/judge/batch`: no output."""

    sub_id: str
    success: bool
    run_success: bool
    cost: float
    reason: str


class BatchResult(msgspec.Struct):
    sub_id: str
    results: list[SubmissionResult] | list[JudgeResult]  # encoded only, never decoded


def decode_body(body: bytes, kind: type[T]) -> T | Refusal:
    """`body` as a `kind`, or a 400 (not UTF-8, not JSON) or 422 (a wrong or missing field)."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as e:
        return Refusal(422, f"invalid request: {e}")
    except msgspec.DecodeError as e:
        return Refusal(400, f"the body is not valid JSON: {e}")
    except UnicodeDecodeError as e:  # msgspec decodes strings' bytes with Python's codec
        return Refusal(400, f"the body is not valid UTF-8: byte {e.start} ({e.reason})")


def _problem(sub: Submission, cfg: SandboxConfig) -> str:
    """What keeps `sub` from running here ("" when nothing)."""
    if sub.type != "python":
        return f'type "{sub.type}" is not served: this sandbox runs Python only'
    if len(sub.solution) > cfg.max_code_bytes - len(SCRIPT_END):
        limit = cfg.max_code_bytes - len(SCRIPT_END)
        return f"solution of {len(sub.solution)} chars exceeds {limit}"
    if sub.input is not None and len(sub.input) > cfg.max_stdin_bytes:
        return f"input of {len(sub.input)} chars exceeds {cfg.max_stdin_bytes}"
    return ""


def _refusal_for(problem: str) -> Refusal:
    status = 413 if "exceeds" in problem else 422
    return Refusal(status, problem)


def parse_submission(body: bytes, cfg: SandboxConfig) -> Submission | Refusal:
    """The body of `/run` or `/judge`, with its `sub_id` filled in, or why it is refused."""
    sub = decode_body(body, Submission)
    if isinstance(sub, Refusal):
        return sub
    problem = _problem(sub, cfg)
    if problem:
        return _refusal_for(problem)
    return msgspec.structs.replace(sub, sub_id=sub.sub_id or str(uuid.uuid4()))


def parse_batch(body: bytes, cfg: SandboxConfig) -> BatchSubmission | Refusal:
    """The body of a batch route, every `sub_id` filled in, or why it is refused (the first
    bad submission is named by its index)."""
    batch = decode_body(body, BatchSubmission)
    if isinstance(batch, Refusal):
        return batch
    for i, sub in enumerate(batch.submissions):
        problem = _problem(sub, cfg)
        if problem:
            return _refusal_for(f"submissions[{i}]: {problem}")
    subs = [
        msgspec.structs.replace(s, sub_id=s.sub_id or str(uuid.uuid4())) for s in batch.submissions
    ]
    return BatchSubmission(subs, "batch", batch.sub_id or str(uuid.uuid4()))


def as_script(code: str) -> str:
    """`code` to run with `python FILE`'s semantics: a trailing expression is not displayed."""
    return code + SCRIPT_END


def exec_request(sub: Submission) -> ExecRequest:
    """What the executor runs for `sub` (the sandbox's default limits)."""
    assert sub.sub_id is not None, "parse_* fills in sub_id"
    return ExecRequest(id=sub.sub_id, code=as_script(sub.solution), stdin=sub.input or "")


def reason(result: ExecResult) -> str:
    """code-judge's `reason` for an executor result."""
    if result.infra in RETRY_LATER:
        return "queue_timeout"
    if result.infra:
        return "internal_error"
    if result.status == "timeout":
        return "worker_timeout"
    if result.status == "rejected":
        return "invalid_input"
    return ""


def run_result(sub: Submission, result: ExecResult) -> SubmissionResult:
    """code-judge's answer to `sub` on the `/run` routes."""
    assert sub.sub_id is not None, "parse_* fills in sub_id"
    run_success = result.status == "ok"
    success = run_success
    if sub.expected_output is not None:
        success = success and result.stdout.strip() == sub.expected_output.strip()
    return SubmissionResult(
        sub_id=sub.sub_id,
        success=success,
        run_success=run_success,
        cost=result.wall_s,
        stdout=result.stdout,
        stderr=result.stderr,
        reason=reason(result),
    )


def judge_result(sub: Submission, result: ExecResult) -> JudgeResult:
    """code-judge's answer to `sub` on the `/judge` routes (no output)."""
    full = run_result(sub, result)
    return JudgeResult(full.sub_id, full.success, full.run_success, full.cost, full.reason)
