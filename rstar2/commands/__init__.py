"""One module per `rstar2` subcommand: `HELP`, `add_arguments(parser)`, `run(args) -> int`.

Beside them, helpers only commands use: `rollout_options.py` (the settings of `eval` and
`chat`), `train_plan.py` (`train --dry-run`), `bench_*.py` (the parts of `bench`).
"""
