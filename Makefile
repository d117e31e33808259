# Every target installs what it needs into .venv first, so a fresh clone works.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: test lint typecheck unit bench demo chaos build dev clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check shared functions infra tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest -q tests

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

bench: $(STAMP)
	@for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

demo: $(STAMP)
	$(BIN)/sluice demo --jobs 2000

chaos: $(STAMP)
	$(BIN)/sluice chaos --runtime lambda --jobs 10000 --duration 600 --seed 1 --operator

build: $(STAMP)
	PYENV_VERSION=3.12.1:3.11.7 PATH=$(CURDIR)/$(BIN):$$PATH sam build --template template.yaml

clean:
	rm -rf $(VENV) .sluice .aws-sam
