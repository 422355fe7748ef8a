# Two commands set everything up on a fresh clone: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install serve test schema bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/ledger serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

schema: $(STAMP)
	$(BIN)/ledger schema > schema.graphql

clean:
	rm -rf $(VENV) .ledger build *.egg-info
