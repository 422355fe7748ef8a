"""Soak tests: long runs that `make test` (and CI) leave out; `make test-soak` runs them (LEDGER_SOAK=1)."""

import os

if os.environ.get("LEDGER_SOAK") != "1":
    collect_ignore_glob = ["test_*.py"]
