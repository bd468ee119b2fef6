"""One module per `rstar2` subcommand: `HELP`, `add_arguments(parser)`, `run(args) -> int`."""
