"""The claim in a transaction raises the status change of every execution it marked RUNNING, for a tenant
with a trigger on `financial.ActionExecution.updated` (queue/attempts.py `raise_started_events`)."""

from __future__ import annotations

from invoke_helpers import publish, tool
from ledger.queue.attempts import raise_started_events
from ledger.queue.claims import claim
from test_queue import start
from trigger_helpers import REVIEW, create_trigger, runs

NOOP = "def run(event):\n    return {}\n"


def test_a_claim_of_two_executions_raises_both_of_their_running_events(api, services):
    noop = publish(api, tool("noop", NOOP))
    trigger = create_trigger(api, publish(api, tool("review", REVIEW)), name="on_running",
                             event="financial.ActionExecution.updated",
                             condition=f'event.record.status == "RUNNING" && event.record.action_id == "{noop}"',
                             input={"execution": {"$cel": "event.recordId"}, "was": {"$cel": "event.previous.status"}})
    started = {start(api, noop)["executionId"] for _ in range(2)}
    conn = services.db.dedicated_connection()
    try:
        rows = claim(conn, "w", 2, 10.0, on_started=lambda c, claimed: raise_started_events(services, c, claimed))
    finally:
        conn.close()
    assert {str(row["execution_id"]) for row in rows} == started
    queued = runs(api, trigger["id"])
    assert sorted((run["event"]["data"]["execution"], run["event"]["data"]["was"]) for run in queued) == sorted(
        (execution_id, "QUEUED") for execution_id in started)
