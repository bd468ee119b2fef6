"""The HTTP front's decisions without sockets: request parsing, result mapping, access, admission."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest

from rstar2.config import ConfigError
from rstar2.sandbox import code_judge, sandbox_fusion
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.http_gate import (
    Admission,
    Refusal,
    authorized,
    check_bind,
    is_loopback,
    load_token,
    presented_token,
)
from rstar2.wire import ExecResult

CFG = SandboxConfig(max_code_bytes=100, max_stdin_bytes=10)
TOKEN = "s3cret-token-0123456789"


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


def result(status: str = "ok", **kw: object) -> ExecResult:
    return ExecResult(id="x", status=status, **kw)  # type: ignore[arg-type]


# -- code-judge: requests ------------------------------------------------------------------


def test_code_judge_batch_as_rstar2_agent_sends_it_gets_ids_filled_in() -> None:
    sent = {
        "type": "batch",
        "submissions": [{"type": "python", "solution": "print(1)", "input": None}],
    }
    batch = code_judge.parse_batch(body(sent), CFG)
    assert isinstance(batch, code_judge.BatchSubmission)
    assert batch.sub_id and batch.submissions[0].sub_id
    request = code_judge.exec_request(batch.submissions[0])
    assert (request.code, request.stdin, request.timeout_s, request.memory_mb) == (
        "print(1)\npass\n", "", None, None,
    )  # fmt: skip


def test_code_judge_keeps_given_ids_and_ignores_unknown_fields() -> None:
    sent = {"sub_id": "s", "type": "python", "solution": "x", "input": "7", "extra": 1}
    sub = code_judge.parse_submission(body(sent), CFG)
    assert isinstance(sub, code_judge.Submission)
    assert (sub.sub_id, code_judge.exec_request(sub).stdin) == ("s", "7")


@pytest.mark.parametrize(
    ("sent", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        (body({"type": "python"}), 422, "solution"),
        (body({"type": "python", "solution": 3}), 422, "solution"),
        (body({"type": "cpp", "solution": "int main(){}"}), 422, "Python only"),
        (body({"type": "java", "solution": "x"}), 422, "type"),
        (body({"type": "python", "solution": "x" * 95}), 413, "of 95 chars exceeds 94"),
        (body({"type": "python", "solution": "x", "input": "y" * 11}), 413, "exceeds 10"),
    ],
)
def test_code_judge_bad_submission_is_refused_with_a_message(
    sent: bytes, status: int, words: str
) -> None:
    refusal = code_judge.parse_submission(sent, CFG)
    assert isinstance(refusal, Refusal)
    assert refusal.status == status and words in refusal.message


def test_code_judge_bad_batch_names_the_item_and_an_empty_batch_is_refused() -> None:
    ok = {"type": "python", "solution": "1"}
    refusal = code_judge.parse_batch(
        body({"submissions": [ok, {"type": "cpp", "solution": "x"}]}), CFG
    )
    assert isinstance(refusal, Refusal) and refusal.message.startswith("submissions[1]:")
    empty = code_judge.parse_batch(body({"type": "batch", "submissions": []}), CFG)
    assert isinstance(empty, Refusal) and empty.status == 422


# -- code-judge: results -------------------------------------------------------------------


def submission(expected: str | None = None) -> code_judge.Submission:
    return code_judge.Submission("python", "print(42)", sub_id="s", expected_output=expected)


@pytest.mark.parametrize(
    ("res", "run_success", "reason"),
    [
        (result("ok", stdout="42\n"), True, ""),
        (result("error", exit_code=1), False, ""),
        (result("memory", exit_code=1), False, ""),
        (result("timeout", exit_code=-9), False, "worker_timeout"),
        (result("rejected", infra="queue_full"), False, "queue_timeout"),
        (result("killed", infra="sandbox_died"), False, "internal_error"),
        (result("rejected", infra="shut_down"), False, "internal_error"),
        (result("rejected", stderr="code too long"), False, "invalid_input"),
    ],
)
def test_code_judge_result_maps_each_status(
    res: ExecResult, run_success: bool, reason: str
) -> None:
    out = code_judge.run_result(submission(), res)
    assert (out.run_success, out.success, out.reason) == (run_success, run_success, reason)
    assert out.reason in code_judge.REASONS


def test_code_judge_success_compares_stripped_output_with_expected() -> None:
    ran = result("ok", stdout="42\n", stderr="w", wall_s=0.25)
    right = code_judge.run_result(submission(" 42 "), ran)
    wrong = code_judge.run_result(submission("41"), ran)
    assert (right.success, right.run_success, right.cost, right.stderr) == (True, True, 0.25, "w")
    assert (wrong.success, wrong.run_success) == (False, True)
    failed = code_judge.run_result(submission("42"), result("error", stdout="42\n", exit_code=1))
    assert (failed.success, failed.run_success) == (False, False)


def test_code_judge_fields_are_exactly_those_its_clients_build_from() -> None:
    # code-judge's judge_client.py builds SubmissionResult(**result): an extra key would raise
    run = msgspec.to_builtins(code_judge.run_result(submission(), result("ok")))
    judge = msgspec.to_builtins(code_judge.judge_result(submission(), result("ok")))
    fields = {"sub_id", "success", "run_success", "cost", "stdout", "stderr", "reason"}
    assert set(run) == fields
    assert set(judge) == fields - {"stdout", "stderr"}


# -- SandboxFusion -------------------------------------------------------------------------


def verl_payload(**kw: object) -> bytes:
    """The body verl's call_sandbox_api posts, field for field."""
    payload = {
        "compile_timeout": 30, "run_timeout": 30, "code": "print(1)", "stdin": None,
        "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": [],
    }  # fmt: skip
    payload.update(kw)
    return json.dumps(payload).encode()


def test_run_code_takes_verls_request_and_maps_limits() -> None:
    req = sandbox_fusion.parse_run_code(verl_payload(stdin="5"), CFG)
    assert isinstance(req, sandbox_fusion.RunCodeRequest)
    ex = sandbox_fusion.exec_request(req, "r")
    assert (ex.code, ex.stdin, ex.timeout_s, ex.memory_mb) == ("print(1)\npass\n", "5", 30.0, 1024)
    bare = sandbox_fusion.parse_run_code(body({"code": "1", "language": "python"}), CFG)
    assert isinstance(bare, sandbox_fusion.RunCodeRequest)
    unlimited = sandbox_fusion.exec_request(
        msgspec.structs.replace(bare, memory_limit_MB=-1), "r"
    )  # SandboxFusion's default -1 (no limit) takes the sandbox's default
    assert (unlimited.timeout_s, unlimited.memory_mb) == (None, None)


@pytest.mark.parametrize(
    ("sent", "status", "words"),
    [
        (b'{"code": ', 400, "not valid JSON"),
        (body({"language": "python"}), 422, "code"),
        (verl_payload(language="cpp"), 422, "Python only"),
        (verl_payload(files={"a.txt": "eA=="}), 422, "files"),
        (verl_payload(fetch_files=["a.txt"]), 422, "files"),
        (verl_payload(run_timeout=0), 422, "run_timeout"),
        (verl_payload(code="x" * 95), 413, "of 95 chars exceeds 94"),
        (verl_payload(stdin="y" * 11), 413, "exceeds 10"),
    ],
)
def test_run_code_bad_request_is_refused(sent: bytes, status: int, words: str) -> None:
    refusal = sandbox_fusion.parse_run_code(sent, CFG)
    assert isinstance(refusal, Refusal)
    assert refusal.status == status and words in refusal.message


def verl_verdict(resp: dict[str, object]) -> object:
    """How verl's _process_single_case scores a response with no expected output (its
    documented codes: True, -1 sandbox error, -2 runtime error, -3 timeout)."""
    run = resp.get("run_result") or {}
    assert isinstance(run, dict)
    if resp["status"] == "SandboxError":
        return -1
    if resp["status"] == "Failed":
        if run.get("status") == "TimeLimitExceeded":
            return -3
        if run.get("status") == "Error" or (
            run.get("status") == "Finished" and run.get("return_code") != 0
        ):
            return -2
        return "unknown"
    if resp["status"] == "Success" and run.get("status") == "Finished":
        return True
    return "unexpected"


@pytest.mark.parametrize(
    ("res", "verdict"),
    [
        (result("ok", stdout="1\n"), True),
        (result("error", exit_code=1), -2),
        (result("memory", exit_code=1), -2),
        (result("output_limit", exit_code=-9), -2),
        (result("output_limit", exit_code=0), -2),
        (result("killed", exit_code=-9), -2),
        (result("timeout", exit_code=-9), -3),
        (result("killed", infra="sandbox_died"), -1),
    ],
)
def test_run_code_response_reads_as_verl_expects(res: ExecResult, verdict: object) -> None:
    resp = msgspec.to_builtins(sandbox_fusion.run_code_response(res))
    assert verl_verdict(resp) == verdict
    assert resp["compile_result"] is None  # verl reads it; Python has nothing to compile
    assert set(resp["run_result"]) == {
        "status",
        "execution_time",
        "return_code",
        "stdout",
        "stderr",
    }
    assert set(resp) >= {"status", "message", "compile_result", "run_result"}


def test_run_code_sandbox_error_says_why_in_message() -> None:
    resp = sandbox_fusion.run_code_response(
        result("killed", stderr="zygote exited", infra="sandbox_died")
    )
    assert resp.status == "SandboxError" and resp.message == "sandbox_died: zygote exited"


# -- access --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.0.1", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
     ("myhost", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_binding_off_loopback_needs_a_token() -> None:
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(ConfigError, match="token"):
        check_bind("0.0.0.0", None)


def test_short_or_spaced_tokens_are_refused_without_echoing_them() -> None:
    assert load_token(f"  {TOKEN}\n", "--token-file") == TOKEN
    for bad in ("short", "has a space in it 0123"):
        with pytest.raises(ConfigError) as err:
            load_token(bad, "--token-file")
        assert bad not in str(err.value)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_token_is_accepted_as_bearer_or_basic_password() -> None:
    assert presented_token(f"Bearer {TOKEN}") == TOKEN
    assert presented_token(basic("rstar2", TOKEN)) == TOKEN
    assert presented_token("Basic !!notbase64") is None
    assert presented_token("Digest abc") is None
    assert authorized(f"bearer {TOKEN}", TOKEN)
    assert authorized(basic("anyone", TOKEN), TOKEN)
    for header in (None, "", f"Bearer {TOKEN}x", "Bearer ", basic(TOKEN, "x"), TOKEN):
        assert not authorized(header, TOKEN), header
    assert authorized(None, None)  # no token: loopback only, anyone local may call


# -- admission -----------------------------------------------------------------------------


def test_admission_refuses_at_once_when_full_and_takes_nothing() -> None:
    gate = Admission(max_items=4, max_bytes=100)
    assert gate.take_items(3) is None
    refusal = gate.take_items(2)
    assert refusal is not None and refusal.status == 503 and gate.items == 3
    too_big = gate.take_items(5)
    assert too_big is not None and too_big.status == 413
    assert gate.take_bytes(60) and not gate.take_bytes(41) and gate.bytes == 60
    gate.release(3, 60)
    assert gate.take_items(4) is None and gate.take_bytes(100)


def test_code_runs_as_a_script_within_the_size_limit() -> None:
    # the executor displays a cell's trailing expression; `python FILE`, which both services
    # run, does not: the appended statement keeps it from being shown, lines unchanged
    assert code_judge.as_script("f()") == "f()\npass\n"
    fits = "x" * (CFG.max_code_bytes - len(code_judge.SCRIPT_END))
    assert isinstance(
        code_judge.parse_submission(body({"type": "python", "solution": fits}), CFG),
        code_judge.Submission,
    )
    assert len(code_judge.as_script(fits)) == CFG.max_code_bytes
    assert isinstance(
        sandbox_fusion.parse_run_code(verl_payload(code=fits), CFG), sandbox_fusion.RunCodeRequest
    )


def test_run_code_says_when_the_output_limit_stopped_the_run() -> None:
    flood = ExecResult(
        id="f", status="output_limit", stdout="x" * 100, exit_code=-9, truncated=True
    )
    resp = sandbox_fusion.run_code_response(flood)
    assert resp.status == "Failed" and "output limit" in resp.message
    assert resp.run_result is not None and resp.run_result.return_code == -9
    plain = ExecResult(id="e", status="error", stderr="ZeroDivisionError", exit_code=1)
    assert sandbox_fusion.run_code_response(plain).message == ""


def test_unavailable_is_code_judges_retry_reason() -> None:
    down = ExecResult(id="u", status="rejected", stderr="restarting", infra="unavailable")
    assert code_judge.reason(down) == "queue_timeout"
    died = ExecResult(id="d", status="killed", infra="sandbox_died")
    assert code_judge.reason(died) == "internal_error"
