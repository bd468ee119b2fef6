"""`rstar2 view` as a command: what it serves, its token rule, and its one-line errors."""

from __future__ import annotations

import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rstar2 import cli
from rstar2.config import UsageError
from rstar2.sandbox.http_gate import bind_socket
from tests.view.conftest import Viewer, start_view
from tests.view.run_files import write_run

TOKEN = "a-token-of-32-characters-at-least"


def fetch(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_it_serves_the_page_and_the_run(viewer: Viewer) -> None:
    status, body = fetch(viewer.url)
    assert status == 200 and b"view.js" in body
    status, body = fetch(viewer.url + "api/sources")
    assert status == 200 and b"step 1 (rl1)" in body and b"eval.jsonl" in body
    assert fetch(viewer.url + "api/set/7.0")[0] == 404


def test_with_a_token_every_request_must_carry_it(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    proc, url = start_view(str(run), env={"RSTAR2_VIEW_TOKEN": TOKEN})
    try:
        assert fetch(url + "api/sources")[0] == 401
        assert fetch(url + "api/sources", "wrong-token-of-enough-length")[0] == 401
        assert fetch(url + "api/sources", TOKEN)[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(["view", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rstar2 view: error: ") and err.count("\n") == 1, err
    return err


def test_bad_paths_a_port_in_use_and_an_exposed_host_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no such run directory" in error_of(capsys, str(tmp_path / "missing"))
    assert "not a run directory" in error_of(capsys, str(tmp_path))
    run = write_run(tmp_path / "run")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        said = error_of(capsys, str(run), "--port", port)
        # the sandbox front's bind_socket, not a copy of it
        with pytest.raises(UsageError) as shared:
            bind_socket("127.0.0.1", int(port), "--port")
    assert said == f"rstar2 view: error: {shared.value}\n"
    assert "Address already in use (another server there? --port picks another)" in said
    assert "a loopback address" in error_of(capsys, str(run), "--host", "0.0.0.0")
    unreadable = tmp_path / "t.jsonl"
    unreadable.write_text("[1, 2]\n")
    assert "not a trajectory file" in error_of(capsys, str(unreadable))
    with pytest.raises(SystemExit) as bad_port:  # argparse's: exit code 2, one line
        cli.main(["view", str(run), "--port", "70000"])
    assert bad_port.value.code == 2
    assert "argument --port: expected a port 0..65535, got '70000'" in capsys.readouterr().err
    token = tmp_path / "token"
    token.write_text("view-token-0123456789abcdef\n")
    # a host that does not resolve: the resolver's reason, blamed on --host (was "Unknown error
    # -2", on --port)
    said = error_of(capsys, str(run), "--host", "999.1.1.1", "--token-file", str(token))
    assert said.startswith("rstar2 view: error: --host: cannot listen on 999.1.1.1:"), said
    assert "Unknown error" not in said and "while attempting" not in said


def test_ctrl_c_stops_it_at_once_with_exit_code_0(tmp_path: Path) -> None:
    """A service stopped by its stop signal, as `sandbox serve`: no traceback, exit code 0."""
    proc, url = start_view(str(write_run(tmp_path / "run")))
    assert fetch(url)[0] == 200
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, "Traceback" in err) == (0, False), err
    assert time.monotonic() - started < 5
