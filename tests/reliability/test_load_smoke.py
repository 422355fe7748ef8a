"""A 5-second version of the soak load (tests/soak/test_soak_load.py runs it for 60 s): mixed traffic from
8 connections against 2 server processes and 2 workers, then the ledger's invariants (reliability/load.py)."""

from __future__ import annotations

import json

from reliability.deployment import unexpected_failures
from reliability.load import run_load


def test_five_seconds_of_mixed_traffic_keep_every_invariant(deployment):
    report = run_load(deployment, seconds=5)
    print("\nload smoke:", json.dumps(report, indent=1))
    assert report["requests"] > 50
    assert report["outcomes"].get("call SUCCEEDED", 0) > 0
    assert report["started_executions"].get("SUCCEEDED", 0) > 0
    # A started transfer that lost a race is run again at once, not left to wait for its lease to lapse.
    for worker in deployment.workers:
        assert unexpected_failures(worker) == []
