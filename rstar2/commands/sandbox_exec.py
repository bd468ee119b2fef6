"""`rstar2 sandbox exec`'s line protocol: JSON request lines on stdin, one result line each.

`parse_line` turns a line into an `ExecRequest`, or into the `rejected` result that answers a
bad one (invalid JSON, an unknown or mistyped field, both `stdin` and its alias `input`);
`run_exec(cfg)` reads stdin, runs the requests in a local executor and writes each result as a
JSON line in completion order, reading the next line only while fewer than
`EXEC_IN_FLIGHT_PER_CHILD` x `concurrency` requests are in flight.

What it does not do: parse the command's options or load the sandbox config
(`rstar2.commands.sandbox`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import msgspec

from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor, open_executor
from rstar2.wire import ExecRequest, ExecResult


def parse_line(line: str, lineno: int) -> ExecRequest | ExecResult:
    """An ExecRequest, or the `rejected` result that answers a bad input line."""
    fallback = f"line-{lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        return ExecResult(id=fallback, status="rejected", stderr=f"invalid JSON: {e}", exit_code=-1)
    if not isinstance(obj, dict):
        return ExecResult(
            id=fallback, status="rejected", stderr="expected a JSON object", exit_code=-1
        )
    rid = obj.get("id")
    rid = rid if isinstance(rid, str) else (str(rid) if isinstance(rid, int) else fallback)
    unknown = set(obj) - {"id", "code", "stdin", "input", "timeout_s", "memory_mb"}
    if unknown:
        message = f"unknown field(s): {', '.join(sorted(unknown))}"
        return ExecResult(id=rid, status="rejected", stderr=message, exit_code=-1)
    if "input" in obj:  # the tool protocol's name for stdin
        if "stdin" in obj:
            message = 'give "stdin" or its alias "input", not both'
            return ExecResult(id=rid, status="rejected", stderr=message, exit_code=-1)
        obj["stdin"] = obj.pop("input")
    problem = _field_problem(obj)
    if problem:
        return ExecResult(id=rid, status="rejected", stderr=problem, exit_code=-1)
    return ExecRequest(
        id=rid,
        code=obj["code"],
        stdin=obj.get("stdin", ""),
        timeout_s=obj.get("timeout_s"),
        memory_mb=obj.get("memory_mb"),
    )


def _field_problem(obj: dict[str, Any]) -> str:
    """What is wrong with the fields of a request line ("" when nothing)."""
    if not isinstance(obj.get("code"), str):
        return 'field "code" must be a string'
    if not isinstance(obj.get("stdin", ""), str):
        return 'field "stdin" must be a string'
    timeout = obj.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        return 'field "timeout_s" must be a number'
    if timeout is not None and not timeout > 0:
        return f'field "timeout_s" must be > 0, got {timeout}'
    memory = obj.get("memory_mb")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int)):
        return 'field "memory_mb" must be an integer'
    if memory is not None and memory < 1:
        return f'field "memory_mb" must be >= 1, got {memory}'
    return ""


def _emit(result: ExecResult) -> None:
    sys.stdout.write(json.dumps(msgspec.structs.asdict(result)) + "\n")
    sys.stdout.flush()


EXEC_IN_FLIGHT_PER_CHILD = 4
"""`exec` reads the next line only while fewer than this many requests per child
(`concurrency`) are in flight: the memory stays bounded however long stdin is."""


async def run_exec(cfg: SandboxConfig) -> int:
    """Answer the JSON-line requests on stdin, one result line each on stdout."""
    in_flight = anyio.Semaphore(EXEC_IN_FLIGHT_PER_CHILD * cfg.concurrency)

    async def one(ex: Executor, request: ExecRequest) -> None:
        try:
            _emit(await ex.run(request))
        finally:
            in_flight.release()

    async with open_executor(cfg) as ex, anyio.create_task_group() as tg:
        lineno = 0
        async for line in anyio.wrap_file(sys.stdin):
            lineno += 1
            if not line.strip():
                continue
            parsed = parse_line(line, lineno)
            if isinstance(parsed, ExecResult):
                _emit(parsed)
            else:
                await in_flight.acquire()
                tg.start_soon(one, ex, parsed)
    return 0
