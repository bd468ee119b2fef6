"""Pure parts of the sandbox, tested without processes: cell compiling, errors, statuses,
framing, config, the bubblewrap command line."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rstar2.config import ConfigError, from_dict
from rstar2.sandbox import framing, runner
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.isolation import bwrap_argv
from rstar2.sandbox.zygote import classify


def test_compile_cell_splits_off_a_trailing_expression() -> None:
    body, last = runner.compile_cell("x = 2\nx * 21")
    ns: dict[str, object] = {}
    exec(body, ns)
    assert last is not None and eval(last, ns) == 42


def test_compile_cell_without_trailing_expression() -> None:
    _, last = runner.compile_cell("x = 2")
    assert last is None


def test_format_error_names_type_line_and_source() -> None:
    source = "a = 1\nb = a / 0"
    try:
        body, _ = runner.compile_cell(source)
        exec(body, {})
    except ZeroDivisionError as e:
        text = runner.format_error(e, source)
    assert text == "ZeroDivisionError at line 2: division by zero\n    b = a / 0"


def test_format_error_of_a_syntax_error() -> None:
    with pytest.raises(SyntaxError) as info:
        runner.compile_cell("x = (1,\n")
    assert runner.format_error(info.value, "x = (1,\n").startswith("SyntaxError at line 1:")


@pytest.mark.parametrize(
    ("reason", "byte", "wait_status", "expected"),
    [
        ("", runner.STATUS_OK, 0, ("ok", 0)),
        ("", runner.STATUS_ERROR, 1 << 8, ("error", 1)),
        ("", runner.STATUS_MEMORY, 1 << 8, ("memory", 1)),
        ("", b"", 7 << 8, ("error", 7)),
        ("", b"", signal.SIGSEGV, ("killed", -signal.SIGSEGV)),
        ("", b"", signal.SIGXCPU, ("timeout", -signal.SIGXCPU)),
        ("timeout", b"", signal.SIGKILL, ("timeout", -signal.SIGKILL)),
        ("output_limit", runner.STATUS_OK, signal.SIGKILL, ("output_limit", -signal.SIGKILL)),
    ],
)
def test_classify(reason: str, byte: bytes, wait_status: int, expected: tuple[str, int]) -> None:
    assert classify(reason, byte, wait_status) == expected


def test_frames_survive_arbitrary_splits() -> None:
    data = framing.pack({"a": 1}) + framing.pack({"b": "é" * 3})
    buf = framing.FrameBuffer()
    got = [frame for i in range(len(data)) for frame in buf.feed(data[i : i + 1])]
    assert got == [{"a": 1}, {"b": "ééé"}] and buf.pending() == 0


def test_frame_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(framing.FrameError):
        framing.FrameBuffer().feed(b"\0\0\0\x02[]")


def test_config_rejects_a_bad_value_by_name() -> None:
    with pytest.raises(ConfigError, match="max_timeout_s"):
        from_dict(SandboxConfig, {"timeout_s": 10.0, "max_timeout_s": 5.0})


def test_limits_are_capped_by_the_server() -> None:
    cfg = SandboxConfig(timeout_s=5.0, max_timeout_s=30.0, memory_mb=512, max_memory_mb=1024)
    assert cfg.limits_for(None, None) == (5.0, 512)
    assert cfg.limits_for(100.0, 1 << 20) == (30.0, 1024)


def test_bwrap_command_mounts_no_project_path() -> None:
    argv = bwrap_argv(SandboxConfig(), "bwrap", "/usr/bin/python3", "/usr")
    project = str(Path(__file__).resolve().parents[2])
    sources = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    targets = [argv[i + 2] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert not any(t.startswith(project) for t in targets)
    assert all(
        s.startswith(project) is False or s.endswith(".py") or "site-packages" in s for s in sources
    )
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--clearenv" in argv
    assert ("--unshare-user" in argv) == (os.geteuid() != 0)
