"""A quick run of the `make bench` harness (about a second per ledger workload, no anchors), so that the
suite's code cannot rot unnoticed. Benchmarks themselves are not timed tests: nothing here checks speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_harness_runs_every_ledger_workload(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bench.run", "--smoke", "--loadgen", "python", "--out",
                             str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    rows = results["rows"]
    assert set(rows) == {"money", "money_peer", "triggers", "read", "mcp", "mcp_2025", "call_tree", "agent", "queue",
                         "queue_triggered", "policy"}
    # The money-moving call with triggers on other types, beside the same call with none, in the same run.
    assert rows["triggers"]["ledger"]["transfers"] > 0 and rows["triggers"]["anchor"]["transfers"] > 0
    assert rows["triggers"]["ratio"] > 0
    # Its ratio is the median of the rounds' own ratios, the median of medians kept beside it.
    assert rows["triggers"]["paired"]["ratios"] and rows["triggers"]["median_of_medians"] > 0
    assert rows["money"]["ledger"]["transfers"] > 0
    assert rows["money"]["ledger"]["statements_per_call"] > 0
    assert rows["read"]["ledger"]["requests"] > 0 and rows["read"]["ledger"]["errors"] == 0
    # The read tool through MCP tools/call, beside the same call through GraphQL invokeAction.
    assert rows["mcp"]["ledger"]["requests"] > 0 and rows["mcp"]["ledger"]["errors"] == 0
    assert rows["mcp"]["anchor"]["requests"] > 0 and rows["mcp"]["anchor"]["errors"] == 0
    assert rows["mcp"]["ratio"] > 0
    # The SDK's latest protocol is the row; 2025-11-25 is reported beside it.
    assert rows["mcp_2025"]["ledger"]["requests"] > 0 and rows["mcp_2025"]["ledger"]["errors"] == 0
    assert rows["call_tree"]["ledger"]["statements_per_tree"] > 0 and rows["call_tree"]["ratio"] > 0
    # An agent turn of 2 rounds with a scripted model, beside the same 2 tool calls made directly.
    assert rows["agent"]["ledger"]["median_ms"] > 0 and rows["agent"]["ledger"]["direct_median_ms"] > 0
    assert rows["queue"]["ledger"]["failed"] == 0 and rows["queue"]["ledger"]["jobs_per_s"] > 0
    # Round trips and durable commits beside their goals.
    assert rows["queue"]["commits"]["value"] > 0 and rows["queue"]["commits"]["goal"] == 2
    assert rows["money"]["roundtrips"]["value"] > 0 and rows["money"]["roundtrips"]["goal"] == 8
    # The durable commits hold with a trigger on execution status changes defined (DESIGN section 15).
    assert rows["queue_triggered"]["ledger"]["failed"] == 0 and rows["queue_triggered"]["commits"]["value"] > 0
    assert rows["policy"]["ledger"]["p99_us"] > 0
    assert results["rss"]["server_mib"] > 0
    # Without the anchors, their rows say so instead of a ratio.
    assert "not measured" in rows["read"]["anchor_text"]
    assert "not measured" in rows["money_peer"]["anchor_text"]
    table = (tmp_path / "results.md").read_text()
    assert "| call tree" in table and "policy" in table and "MCP `tools/call`" in table
    assert "(goal ≤ 8, " in table and "durable commits (goal ≤ 2, " in table
