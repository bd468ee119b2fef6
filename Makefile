# Quick start: `make train` (install + the embedded default run), `make test` (install + tests).
.PHONY: install install-test train test lint

install:
	scripts/install.sh

install-test:
	scripts/install.sh test

train: install
	.venv/bin/rstar2 train

test: install-test
	.venv/bin/ruff check rstar2 sim tests scripts
	.venv/bin/python -m pytest -q
