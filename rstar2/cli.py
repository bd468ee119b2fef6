"""The `rstar2` command line: one entry point, one module per subcommand.

Each subcommand lives in `rstar2/commands/<name>.py` and exposes `add_arguments(parser)` and
`run(args) -> int`; its one-line help is stated once, in `COMMANDS` below. Only the chosen subcommand's module is imported,
so `rstar2 --help` stays fast and a heavy dependency (torch) is loaded only by commands that use
it. Logging is configured here (`rstar2.log_format`), and alike in the graph's spawned
processes, nowhere else.

`main` is the one error boundary. An expected failure is one line on stderr,
`rstar2 <command>: error: <message>`, never a traceback, and the exit code says which kind:

- 0: success;
- 1: an unexpected error, i.e. a bug: its traceback is printed (also a command's own
  `SystemExit("message")`, which prints the message);
- 2: bad input: a bad command line (argparse: an unknown flag, a value of the wrong type or
  out of range, named by its flag), a bad config key or value (`ConfigError`), a bad
  combination of flags (`UsageError`), a user-given path that is missing, of the wrong kind,
  not readable or not writable (`FileNotFoundError`, `IsADirectoryError`,
  `NotADirectoryError`, `PermissionError`, `FileExistsError`, and an `OSError` of a read-only
  file system, a full disk, an exceeded quota or file size limit), or a user file that does
  not decode (JSON, TOML, YAML, msgspec, UTF-8); an exception group (a task group's) of one such error counts as
  that error; `-v` adds the traceback of such an error, for reporting;
- 130: interrupted (Ctrl-C, `KeyboardInterrupt`), also while the command's module is imported
  and when the Ctrl-C landed in a finaliser, which Python would swallow (`keep_interrupts`);
  the process then ends without the interpreter's teardown (`exit_at_once`);
- 143: a training run (`train`, `experiment`, `bench train`) stopped by SIGTERM (`launch`
  returns 130 or 143 itself for a graph a signal stopped);
- 141: stdout was closed early (`rstar2 sim ... | head -1`): the rest of the output is dropped
  without a message, as a process killed by SIGPIPE would (128 + 13).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import signal
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import NoReturn

from rstar2.commands.arguments import EXIT_USAGE, CommandParser
from rstar2.config import ConfigError, UsageError
from rstar2.log_format import setup_logging

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_BROKEN_PIPE = 141
REDELIVER_S = 0.02
"""How long after a swallowed Ctrl-C it is sent again (`keep_interrupts`)."""
GOMP_SPINCOUNT = "10000"
"""How long torch's OpenMP threads spin before sleeping (see `main`)."""

# name -> (module, one-line help). Help strings live here so `--help` imports nothing heavy.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rstar2.commands.train", "run the full trainer (SFT then GRPO-RoC RL stages)"),
    "eval": ("rstar2.commands.eval", "evaluate a model on a problem set (pass@1, tool use)"),
    "analyze": (
        "rstar2.commands.analyze",
        "high-entropy tokens of trajectories: reflection vs forking, SFT vs RL",
    ),
    "chat": ("rstar2.commands.chat", "one tool-using conversation, printed as it happens"),
    "init-model": ("rstar2.commands.init_model", "create the tiny embedded default model locally"),
    "convert": (
        "rstar2.commands.convert",
        "a GGUF file or training checkpoint as a model directory",
    ),
    "sandbox": (
        "rstar2.commands.sandbox",
        "the isolated Python code executor (exec, serve, bench)",
    ),
    "reward": ("rstar2.commands.reward", "answer extraction and verification (verify)"),
    "sim": ("rstar2.commands.sim", "simulate rollout scheduling policies without GPUs"),
    "bench": ("rstar2.commands.bench", "benchmarks: bus, engine, train, learner"),
    "profile": ("rstar2.commands.profile", "trace a short run and name the bottleneck actor"),
    "top": ("rstar2.commands.top", "live per-actor rates, queue depths and busy share"),
    "launch": (
        "rstar2.commands.launch",
        "start an actor graph, or this node's share of a multi-host graph",
    ),
    "learner-rank": (
        "rstar2.commands.learner_rank",
        "one rank of a sharded learner, started by torchrun or srun (multi-host)",
    ),
    "experiment": ("rstar2.commands.experiment", "arms x envs x seeds: one table and plots"),
    "view": ("rstar2.commands.view", "a run's curves and recorded rollouts as a local web page"),
}

# user-given paths that are missing, of the wrong kind or not readable: bad input, not a bug
_PATH_ERRORS = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    FileExistsError,
)
# where the user asked for output that cannot be written: read-only, full, over quota or over
# the file size limit (ulimit -f)
_WRITE_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# user files that do not decode; yaml and msgspec are matched by name (see _decode_error)
_DECODE_ERRORS = (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError)

log = logging.getLogger("rstar2")


def _load(name: str) -> ModuleType:
    module_name, _ = COMMANDS[name]
    return importlib.import_module(module_name)


def _available() -> dict[str, tuple[str, str]]:
    """Commands whose module exists in this checkout (work in progress lands one by one)."""
    out = {}
    for name, (module_name, help_text) in COMMANDS.items():
        if importlib.util.find_spec(module_name) is not None:
            out[name] = (module_name, help_text)
    return out


def version() -> str:
    """The installed `rstar2` distribution's version ("unknown" when run from a bare tree)."""
    try:
        return importlib.metadata.version("rstar2")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="rstar2", description="Agentic RL of language models with a code tool."
    )
    parser.add_argument("--version", action="version", version=f"rstar2 {version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in _available().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            _load(name).add_arguments(p)
    return parser


def chosen_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The innermost (sub)command parser `args` went through: `rstar2 sim compare`'s for
    `rstar2 sim compare ...`, the top-level one when no command was chosen."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def bound_openmp_spin() -> None:
    """Bound how long torch's OpenMP threads spin, unless the user chose a policy.

    torch's OpenMP threads (libgomp) spin-wait at the end of every parallel region, by default
    for 300,000 spins; when other processes share the cores, the spinning thread holds the core
    that the thread it waits for needs, and the engine's and HF's small decode steps ran
    10-150x slower (docs/results.md, "Embedded engine"). Passive waiting fixed that but cost
    ~45% of the idle engine's speed; a short spin (10,000) keeps both (measured: idle as fast
    as spinning, under contention within 5% of passive). The OpenMP runtime reads this once,
    when torch loads it, so it must run before anything imports torch (children inherit it); a
    user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)


def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, run the chosen command and return its exit code (see the module
    docstring). A bad command line or `--help` raises SystemExit, as argparse does. Run as the
    program (`argv` None: `rstar2`, `python -m rstar2.cli`), an interrupted command ends the
    process at once (`exit_at_once`)."""
    with keep_interrupts():
        code = parse_and_run(sys.argv[1:] if argv is None else argv)
    if argv is None and code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        exit_at_once(code)
    return code


@contextmanager
def keep_interrupts() -> Iterator[None]:
    """Within: a Ctrl-C that Python swallows is raised again in the main thread.

    A `KeyboardInterrupt` raised while a finaliser runs (an object's `__del__`, a weakref
    callback: the garbage collector calls them between any two lines) cannot propagate; Python
    prints "Exception ignored in ..." with a traceback and goes on, so the Ctrl-C is lost and
    the command runs to its end (seen: `rstar2 chat` interrupted while `regex` freed a pattern
    at import, exit 0). The hook sees such an error and has a helper thread send SIGINT to the
    main thread again a moment later (`REDELIVER_S`), when the hook, itself a place where an
    exception is swallowed, has returned: it interrupts a blocking call as the first did, and
    should it land in a finaliser again, comes back here. Any other error goes to the hook
    that was in place."""
    previous = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            main_thread = threading.main_thread().ident
            assert main_thread is not None  # it has started: this process runs
            resend = threading.Timer(REDELIVER_S, signal.pthread_kill, (main_thread, signal.SIGINT))
            resend.daemon = True
            resend.start()
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def parse_and_run(argv: list[str]) -> int:
    """`main`'s work: the environment, the parser, the command."""
    # weight-loading progress bars of transformers/huggingface_hub would interleave with our
    # one-line-per-step progress output; set before any command module imports transformers
    # (spawned children inherit it)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    bound_openmp_spin()  # before any command imports torch
    selected = next((a for a in argv if not a.startswith("-")), None)
    # the chosen command's module is imported here, for its flags (a `bench` target's when
    # parsing): seconds for torch's
    try:
        parser = build_parser(selected if selected in _available() else None)
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the (sub)command they were given to, whose --help lists its flags
            chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    except KeyboardInterrupt:
        print(f"{'rstar2 ' + selected if selected else 'rstar2'}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.command is None:
        parser.print_help()
        return 0
    setup_logging(args.verbose, args.quiet)
    return run_command(args)


def exit_at_once(code: int) -> NoReturn:
    """End the process with `code`, skipping the interpreter's teardown. For an interrupted
    command: its work is stopped and its files closed by then (writers finish or remove their
    temporaries in `finally`), so the teardown has only memory left to free, and that took
    seconds of garbage collection once torch and a model were loaded (2-3 s at load 4, most of
    the time from Ctrl-C to exit: `rstar2 convert`, `bench train`). What an exit does besides
    is kept: non-daemon threads are joined and the exit handlers run (logging's flush,
    multiprocessing's reaping of its children, temporary files), stdout and stderr flushed."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing to flush to
            pass
    os._exit(code)


def run_command(args: argparse.Namespace) -> int:
    """Run `args.command`: the error boundary."""
    name = args.command
    try:
        code = int(_load(name).run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at interpreter exit
        return code
    except KeyboardInterrupt as e:
        print(f"rstar2 {name}: interrupted", file=sys.stderr)
        # a training run stopped by SIGTERM (`TrainingInterrupted` names the signal)
        return EXIT_TERMINATED if getattr(e, "signal_name", "") == "SIGTERM" else EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python's recipe (docs: "Note on SIGPIPE"): point stdout at devnull so that the flush
        # at exit does not fail a second time
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:
        message = bad_input_message(e)
        if message is None:
            raise  # a bug: keep the traceback
        log.debug("the traceback of this error", exc_info=True)
        print(f"rstar2 {name}: error: {message}", file=sys.stderr)
        return EXIT_USAGE


def bad_input_message(e: BaseException) -> str | None:
    """The one-line message of an error that is bad input (see the module docstring), None
    for any other error."""
    if isinstance(e, BaseExceptionGroup):
        leaves = _leaves(e)
        return bad_input_message(leaves[0]) if len(leaves) == 1 else None
    if isinstance(e, ConfigError | UsageError):
        return str(e)
    if isinstance(e, _PATH_ERRORS) or (isinstance(e, OSError) and e.errno in _WRITE_ERRNOS):
        if e.filename is None:
            return str(e)
        where = f"{e.filename} -> {e.filename2}" if e.filename2 else str(e.filename)
        return f"{e.strerror}: {where}"
    if isinstance(e, _DECODE_ERRORS) or _decode_error(e):
        return " ".join(f"{type(e).__name__}: {e}".split())  # YAML's messages span lines
    return None


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions of a (nested) exception group that are not groups themselves."""
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _decode_error(e: BaseException) -> bool:
    """A PyYAML or msgspec decode error. Matched through the loaded module (never imported
    here: an error of a module nobody imported cannot have been raised)."""
    yaml, msgspec = sys.modules.get("yaml"), sys.modules.get("msgspec")
    return (yaml is not None and isinstance(e, yaml.YAMLError)) or (
        msgspec is not None and isinstance(e, msgspec.DecodeError)
    )


if __name__ == "__main__":
    sys.exit(main())
