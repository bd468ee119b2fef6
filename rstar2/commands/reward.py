"""`rstar2 reward verify`: score JSON lines from stdin with the reward pool.

Input, one JSON object per line: `{"id": ..., "response": "...", "answer": "..."}`.
Output, one line per input line, in input order:
`{"id": ..., "reward": 0.0|1.0, "extracted": "..."|null, "status": "ok"|"no_answer"|"timeout"|"error"}`
plus `"message"` when something went wrong. A line that is not valid JSON, not an object, or
lacks a string `response`/non-empty string `answer` gets status "error" (id null when it has
none) and processing goes on. Lines are read in chunks and each chunk is scored concurrently.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import anyio

from rstar2.commands.arguments import positive_float, positive_int
from rstar2.reward import RewardConfig, RewardResult, open_reward_pool
from rstar2.reward.reward_pool import RewardPool

CHUNK_LINES = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("verify", help="score JSON lines {id, response, answer} from stdin")
    defaults = RewardConfig()
    p.add_argument(
        "--workers", type=positive_int, default=defaults.workers, help="verifier processes"
    )
    p.add_argument(
        "--timeout", type=positive_float, default=defaults.timeout_s, help="seconds per answer"
    )
    p.add_argument("--no-fast-path", action="store_true", help="send every answer to math-verify")


def run(args: argparse.Namespace) -> int:
    cfg = RewardConfig(
        workers=args.workers, timeout_s=args.timeout, fast_path=not args.no_fast_path
    )
    cfg.validate()
    anyio.run(verify_stream, cfg, sys.stdin, sys.stdout)
    return 0


def parse_line(line: str) -> tuple[Any, str, str] | dict[str, Any]:
    """(id, response, answer) from one input line, or the error output line for it."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return _error_row(None, f"invalid JSON: {e}")
    if not isinstance(row, dict):
        return _error_row(None, f"expected a JSON object, got {type(row).__name__}")
    row_id = row.get("id")
    response, answer = row.get("response"), row.get("answer")
    if not isinstance(response, str):
        return _error_row(row_id, '"response" must be a string')
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        return _error_row(row_id, '"answer" must be a non-empty string')
    return row_id, response, answer


def _error_row(row_id: Any, message: str) -> dict[str, Any]:
    return {"id": row_id, "reward": 0.0, "extracted": None, "status": "error", "message": message}


def result_row(row_id: Any, result: RewardResult) -> dict[str, Any]:
    row = {
        "id": row_id,
        "reward": result.reward,
        "extracted": result.extracted,
        "status": result.status,
    }
    if result.message:
        row["message"] = result.message
    return row


async def verify_stream(cfg: RewardConfig, source: TextIO, sink: TextIO) -> None:
    """Score every non-blank line of `source`, writing one JSON line each to `sink`."""
    async with open_reward_pool(cfg) as pool:
        while True:
            lines = await anyio.to_thread.run_sync(_read_chunk, source)
            if not lines:
                return
            rows = await _score_chunk(pool, lines)
            for row in rows:
                sink.write(json.dumps(row) + "\n")
            sink.flush()


async def _score_chunk(pool: RewardPool, lines: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{} for _ in lines]

    async def score_one(i: int, row_id: Any, response: str, answer: str) -> None:
        rows[i] = result_row(row_id, await pool.score(response, answer))

    async with anyio.create_task_group() as tg:
        for i, line in enumerate(lines):
            parsed = parse_line(line)
            if isinstance(parsed, dict):
                rows[i] = parsed
            else:
                tg.start_soon(score_one, i, *parsed)
    return rows


def _read_chunk(source: TextIO) -> list[str]:
    lines: list[str] = []
    for line in source:
        if line.strip():
            lines.append(line)
        if len(lines) >= CHUNK_LINES:
            break
    return lines
