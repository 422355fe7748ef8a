# Two commands set everything up on a fresh clone: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# GraphiQL's pinned assets (npm registry), served by the server so that GraphiQL works offline. A failed
# fetch (no npm, no network) never fails the build: the page then falls back to the public CDN, and the
# next `make` tries again.
GRAPHIQL := .cache/graphiql/manifest.json
ARGS ?=

.PHONY: install assets serve test test-soak schema bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

$(GRAPHIQL): $(STAMP) ledger/api/graphiql.py
	@$(BIN)/ledger assets fetch --dest .cache/graphiql \
		|| echo "GraphiQL assets not fetched: its page falls back to the public CDN (retried on the next make)"

install: $(STAMP) $(GRAPHIQL)

assets: $(GRAPHIQL)

serve: $(STAMP) $(GRAPHIQL)
	$(BIN)/ledger serve $(ARGS)

test: $(STAMP) $(GRAPHIQL)
	$(BIN)/python -m pytest -q $(ARGS)

# `make test-soak`: the long runs CI leaves out (tests/soak/): 60 s of mixed load on 2 server processes and
# 2 workers, repeated faults, and the fuzzers and the chain model with many examples. Several minutes.
test-soak: $(STAMP)
	LEDGER_SOAK=1 $(BIN)/python -m pytest -q -s tests/soak $(ARGS)

# `make bench`: the ledger side by side with pgbench, PostGraphile 4 and graphile-worker on one throwaway
# PostgreSQL cluster (bench/run.py; ARGS=... passes options). CI does not run it; `make test` runs a quick
# smoke of its harness. wrk (Debian) is the load generator when it is installed, else a Python process.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	@command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq wrk >/dev/null 2>&1; } \
		|| echo "wrk is not installed: the bench uses its Python load generator"
	$(BIN)/python -m bench.run $(ARGS)

schema: $(STAMP)
	$(BIN)/ledger schema > schema.graphql

clean:
	rm -rf $(VENV) .ledger build *.egg-info
