# Quick start: `make train` (install + the embedded default run), `make test` (install + lint,
# the import layering of pyproject.toml's [tool.importlinter], tests).
.PHONY: install install-test train test lint

install:
	scripts/install.sh

install-test:
	scripts/install.sh test

train: install
	.venv/bin/rstar2 train

test: install-test
	.venv/bin/ruff check rstar2 sim tests scripts
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q
