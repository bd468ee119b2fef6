"""One module per `rstar2` subcommand: `HELP`, `add_arguments(parser)`, `run(args) -> int`.

Beside them, helpers only commands use: `arguments.py` (argument types such as `positive_int`,
and the parser class: one-line errors, defaults in `--help`), `rollout_options.py` (the
settings of `eval` and `chat`), `train_plan.py` (`train --dry-run`), `bench_*.py` (the parts of
`bench`).
"""
