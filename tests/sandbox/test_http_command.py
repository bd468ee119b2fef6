"""`rstar2 sandbox serve --http` and `bench --http`: options, the token rule, the real bench."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from rstar2.commands import sandbox as command
from rstar2.config import ConfigError, UsageError
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.http_bench import all_failed, request_for, run_http_bench, succeeded
from rstar2.sandbox.http_front import HttpConfig
from rstar2.sandbox.http_server import serve_http

CLI = [sys.executable, "-m", "rstar2.cli", "-q", "sandbox"]
TOKEN = "cmd-token-0123456789abcdef"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(argv)


def test_serve_http_takes_host_port_and_the_limits() -> None:
    http = command.http_config(parse("serve", "--http", "[::1]:8081", "--max-items", "9"))
    assert (http.host, http.port, http.token, http.max_items) == ("::1", 8081, None, 9)
    with pytest.raises(SystemExit):
        parse("serve", "--http", "8081")
    with pytest.raises(SystemExit):  # one transport or the other
        parse("serve", "--http", "127.0.0.1:1", "--bind", "ipc:///tmp/x")
    with pytest.raises(UsageError, match="--curve-keys"):
        command.http_config(parse("serve", "--http", "127.0.0.1:1", "--curve-keys", "k.json"))


def test_tls_needs_both_files_and_checks_them_before_serving(tmp_path: Path) -> None:
    text = tmp_path / "cert.txt"
    text.write_text("not a certificate\n")
    with pytest.raises(UsageError, match="--tls-cert and --tls-key go together"):
        command.http_config(parse("serve", "--http", "127.0.0.1:1", "--tls-cert", str(text)))
    both = ("--tls-cert", str(text), "--tls-key", str(text))
    with pytest.raises(UsageError, match=r"--tls-key .*: not a PEM certificate and its key \("):
        command.http_config(parse("serve", "--http", "127.0.0.1:1", *both))
    missing = ("--tls-cert", str(tmp_path / "no.pem"), "--tls-key", str(tmp_path / "no.key"))
    with pytest.raises(UsageError, match=r"\(No such file or directory\)"):
        command.http_config(parse("serve", "--http", "127.0.0.1:1", *missing))


def test_off_loopback_the_token_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(command.TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match="token"):
        command.http_config(parse("serve", "--http", "0.0.0.0:8080"))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = parse("serve", "--http", "0.0.0.0:8080", "--token-file", str(token_file))
    assert command.http_config(args).token == TOKEN
    monkeypatch.setenv(command.TOKEN_ENV, TOKEN)
    assert command.http_config(parse("serve", "--http", "0.0.0.0:8080")).token == TOKEN
    with pytest.raises(ConfigError, match="readable"):
        command.token_of(parse("serve", "--http", "0.0.0.0:1", "--token-file", "/nonexistent"))


def test_a_refused_bind_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [*CLI, "serve", "--http", "0.0.0.0:8080"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "token" in done.stderr


def test_bench_requests_and_success_per_api() -> None:
    assert request_for("code-judge", "1") == ("/run", {"type": "python", "solution": "1"})
    assert request_for("sandbox-fusion", "1") == ("/run_code", {"code": "1", "language": "python"})
    assert succeeded("code-judge", 200, {"run_success": True})
    assert not succeeded("code-judge", 200, {"run_success": False})
    assert not succeeded("code-judge", 503, {"run_success": True})
    assert succeeded("sandbox-fusion", 200, {"status": "Success"})
    assert not succeeded("sandbox-fusion", 200, {"status": "Failed"})
    assert not succeeded("sandbox-fusion", 200, "pong")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_http_measures_each_workload_through_both_apis() -> None:
    args = ["bench", "--http", "--json", "--seconds", "0.3", "--concurrency", "2"]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180, check=True)
    out = json.loads(done.stdout)
    assert out["url"].startswith("http://127.0.0.1:")
    for name in ("trivial", "numpy", "sympy"):
        assert set(out[name]) == {"code-judge", "sandbox-fusion", "direct"}
        for via in out[name].values():
            assert via["rps"] > 0 and via["failures"] == 0 and via["p99_ms"] >= via["p50_ms"] > 0


@pytest.mark.anyio
async def test_bench_http_measures_a_service_at_a_url_with_its_token() -> None:
    cfg = SandboxConfig(concurrency=2, preload=[], warmup=False)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, cfg, HttpConfig(port=0, token=TOKEN))
        url = f"http://127.0.0.1:{port}"
        lines: list[str] = []
        out = await run_http_bench(cfg, url, ["code-judge"], 0.2, TOKEN, lines.append)
        denied = await run_http_bench(cfg, url, ["sandbox-fusion"], 0.2, None, lines.append)
        tg.cancel_scope.cancel()
    assert out["url"] == url and "isolation" not in out
    trivial = out["trivial"]
    assert set(trivial) == {"code-judge"} and trivial["code-judge"]["failures"] == 0  # type: ignore[index]
    assert trivial["code-judge"]["rps"] > 0  # type: ignore[index]
    refused = denied["trivial"]["sandbox-fusion"]  # type: ignore[index]
    assert refused["failures"] == refused["requests"] > 0  # 401 without the token
    assert all_failed(denied) and not all_failed(out)


@pytest.mark.anyio
@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:1"])
async def test_bench_at_a_url_that_does_not_answer_is_a_usage_error(url: str) -> None:
    cfg = SandboxConfig(concurrency=1, preload=[], warmup=False)
    with pytest.raises(UsageError, match=r"argument --http: cannot reach"):
        await run_http_bench(cfg, url, ["code-judge"], 0.2, None, lambda line: None)


def test_a_bench_whose_every_request_failed_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = {"requests": 3, "failures": 3, "rps": 1.0, "p50_ms": 1.0, "p99_ms": 1.0}

    async def every_request_fails(*args: object) -> dict[str, object]:
        return {"url": "http://x", "clients": 1, "trivial": {"code-judge": failed}}

    monkeypatch.setattr(command, "run_http_bench", every_request_fails)
    args = parse("bench", "--http", "http://x", "--json", "--api", "code-judge")
    assert command.run(args) == 1
    ok = {**failed, "failures": 2}

    async def one_succeeds(*args: object) -> dict[str, object]:
        return {"url": "http://x", "clients": 1, "trivial": {"code-judge": ok}}

    monkeypatch.setattr(command, "run_http_bench", one_succeeds)
    assert command.run(args) == 0
