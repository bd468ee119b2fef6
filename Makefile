# Quick start: `make train` (install + the embedded default run), `make test` (install + lint,
# the import layering of pyproject.toml's [tool.importlinter], tests).
.PHONY: install install-test train test lint

# pytest-xdist workers for `make test` (2: the CI machine's cores, and what CI runs)
PYTEST_WORKERS ?= 2

install:
	scripts/install.sh

install-test:
	scripts/install.sh test

train: install
	.venv/bin/rstar2 train

test: install-test
	.venv/bin/ruff check rstar2 sim tests scripts
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q -n $(PYTEST_WORKERS)
