"""The problem files of a training run, read with its `data_format`, and where each split's
problems come from.

- `load_problem_file(cfg, key)`: the problems of the file that config key (`data`,
  `heldout_data`, `test_data`) names. A file that cannot be read or a row that does not parse
  is a `ConfigError` naming the key (the CLI's one line, exit code 2); a row without the field
  adds a hint at `data_format`.
- `split_sources(cfg)`: where each split's problems come from, in words, for the log at start:
  a run given `data` alone still validates and tests on the built-in task, and says so.

What it does not do: pick the splits' problems or check them for leaks
(`accuracy.eval_splits`), or order them (`problem_stream`).
"""

from __future__ import annotations

from rstar2.config import ConfigError
from rstar2.data import BadRow, load_problems
from rstar2.problem import Problem
from rstar2.train.config import TrainConfig

FIELD_HINT = (
    "; data_format.problem_field, data_format.answer_field and data_format.id_field name the fields"
)
BUILT_IN = "the built-in arithmetic task's"


def load_problem_file(cfg: TrainConfig, key: str) -> list[Problem]:
    """The problems of the file named by `cfg.<key>` (see the module docstring)."""
    path: str = getattr(cfg, key)
    fmt = cfg.data_format
    try:
        loaded = load_problems(
            path, fmt.problem_field, fmt.answer_field, fmt.id_field, fmt.skip_bad_rows
        )
    except BadRow as e:
        hint = FIELD_HINT if "missing field" in str(e) else ""
        raise ConfigError(key, path, f"a usable problem file ({e}{hint})") from None
    except (OSError, ValueError) as e:  # missing, a directory, not JSON or Parquet
        reason = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror else e
        raise ConfigError(key, path, f"a usable problem file ({reason})") from None
    if not loaded.problems:
        raise ConfigError(key, path, "a problem file with at least one problem")
    return [Problem(p.id, p.problem, p.answer) for p in loaded.problems]


def split_sources(cfg: TrainConfig) -> dict[str, str]:
    """Split name (training, validation, test) -> where its problems come from."""
    heldout = (
        f"heldout_data {cfg.heldout_data}" if cfg.heldout_data else f"{BUILT_IN} held-out split"
    )
    if cfg.test_problems == 0:
        test = "nowhere (test_problems = 0)"
    elif cfg.test_data:
        test = f"test_data {cfg.test_data}"
    else:
        test = f"{heldout}, after the validation problems"
    return {
        "training": f"data {cfg.data}" if cfg.data else f"{BUILT_IN} training split",
        "validation": heldout,
        "test": test,
    }
