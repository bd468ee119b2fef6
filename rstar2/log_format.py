"""The log format of every rstar2 process: the command line and the graph's spawned children.

`setup_logging(verbose, quiet)` configures the root logger once per process: INFO by default,
DEBUG with `-v`, WARNING with `-q`, one line per record on stderr. The CLI entry point calls it
for the main process; a spawned graph process (`rstar2.actors.child`) calls it with the level
its parent runs at, so every process's lines look alike.

What it does not do: create loggers (modules use `logging.getLogger(__name__)`) or write
metrics (`rstar2.metrics`).
"""

from __future__ import annotations

import logging
import sys


def setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
