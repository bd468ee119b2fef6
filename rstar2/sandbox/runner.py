"""Runs one cell of untrusted code in a sandbox child: IPython-like display, compact errors.

A trailing bare expression's value is printed (its `repr`, unless it is None), as a notebook
would show it. An uncaught exception is reported on stderr as `<Type> at line N: message` plus
the offending source line (the deepest frame inside the cell), not as a full traceback: that is
what the model reads. The outcome is one status byte that the zygote turns into a result status.

What it does not do: any confinement (see `confinement.py`) or output capping (the zygote).
Standard library only: this file is bound into the sandbox and imported by the zygote there.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types

FILENAME = "<code>"

STATUS_OK = b"o"
STATUS_ERROR = b"e"
STATUS_MEMORY = b"m"
STATUS_SETUP = b"s"


def compile_cell(source: str) -> tuple[types.CodeType, types.CodeType | None]:
    """Compile `source` into (body, trailing expression or None). Raises SyntaxError."""
    tree = ast.parse(source, FILENAME, "exec")
    last: types.CodeType | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        expr = tree.body.pop()
        last = compile(ast.Expression(expr.value), FILENAME, "eval")
    return compile(tree, FILENAME, "exec"), last


def error_line(exc: BaseException) -> int | None:
    """Line of the cell where `exc` happened: the deepest traceback frame inside the cell."""
    if isinstance(exc, SyntaxError) and exc.filename == FILENAME:
        return exc.lineno
    lineno = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == FILENAME:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


def format_error(exc: BaseException, source: str) -> str:
    """`<Type> at line N: message` and the offending line, or `<Type>: message` without one."""
    name = type(exc).__name__
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    lineno = error_line(exc)
    if lineno is None:
        return f"{name}: {message}" if message else name
    head = f"{name} at line {lineno}: {message}" if message else f"{name} at line {lineno}"
    lines = source.splitlines()
    if 1 <= lineno <= len(lines) and lines[lineno - 1].strip():
        return f"{head}\n    {lines[lineno - 1].strip()}"
    return head


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_cell(source: str) -> tuple[bytes, int]:
    """Execute `source` as `__main__` and return (status byte, exit code)."""
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        body, last = compile_cell(source)
        exec(body, namespace)
        if last is not None:
            value = eval(last, namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as e:
        code = _exit_code(e)
        return (STATUS_OK if code == 0 else STATUS_ERROR), code
    except MemoryError as e:
        _report(e, source)
        return STATUS_MEMORY, 1
    except BaseException as e:  # noqa: BLE001 - untrusted code: every failure becomes data
        _report(e, source)
        return STATUS_ERROR, 1
    return STATUS_OK, 0


def _report(exc: BaseException, source: str) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the cell closed or broke its stdout: the error still goes to stderr
    try:
        print(format_error(exc, source), file=sys.stderr)
    except (OSError, ValueError, MemoryError):
        pass  # stderr is gone too: the status byte still tells what happened
