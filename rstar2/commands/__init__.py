"""One module per `rstar2` subcommand: `HELP`, `add_arguments(parser)`, `run(args) -> int`.

Beside them, helpers only commands use: `arguments.py` (argument types such as `positive_int`,
and the parser class: one-line errors, defaults in `--help`), `rollout_options.py` (the
flags of `eval` and `chat`; `rollout_settings.py` resolves them), `eval_run.py` and
`chat_run.py` (the heavy halves of `eval` and `chat`, imported once their input is checked, so
that a bad flag is refused before torch loads), `train_plan.py` (`train --dry-run`), `bench_*.py` (the parts of
`bench`).
"""
