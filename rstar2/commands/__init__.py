"""One module per `rstar2` subcommand: `add_arguments(parser)` and `run(args) -> int`; each
command's one-line help lives in `rstar2.cli.COMMANDS` (a `bench` target's in `bench.TARGETS`),
so that `rstar2 --help` imports none of these modules.

Beside them, helpers only commands use: `arguments.py` (argument types such as `positive_int`,
and the parser class: one-line errors, defaults in `--help`), `rollout_options.py` (the
flags of `eval` and `chat`; `rollout_settings.py` resolves them), `eval_run.py` and
`chat_run.py` (the heavy halves of `eval` and `chat`, imported once their input is checked, so
that a bad flag is refused before torch loads), `train_plan.py` (`train --dry-run`), `bench_*.py` (the parts of
`bench`).
"""
