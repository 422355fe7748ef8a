"""The claim of executions no trigger can react to commits without waiting for the WAL's flush
(migration 0014): the attempt's synchronous commit flushes it first, and nothing acknowledged depends on it."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from invoke_helpers import publish, tool
from ledger.db.pool import APP_ROLE
from ledger.queue.claims import claim
from test_queue import start

NOOP = "def run(event):\n    return {}\n"


def _app_connection(db_url: str, *, autocommit: bool) -> psycopg.Connection:
    conn = psycopg.connect(db_url, autocommit=autocommit, row_factory=dict_row)
    conn.execute(f"SET ROLE {APP_ROLE}")
    # The test cluster runs without durability; a deployment's default is on.
    conn.execute("SET synchronous_commit = on")
    if not autocommit:
        conn.commit()
    return conn


def test_the_workers_claim_of_untriggered_executions_turns_the_flush_wait_off_for_its_own_transaction(api, db_url):
    started = start(api, publish(api, tool("noop", NOOP)))
    # A connection in a transaction, so that the claim's setting can be read in it afterwards.
    with _app_connection(db_url, autocommit=False) as conn:
        rows = claim(conn, "w", 1, 10.0, untriggered_first=True)
        assert [str(row["execution_id"]) for row in rows] == [started["executionId"]]
        assert conn.execute("SELECT current_setting('synchronous_commit') AS s").fetchone()["s"] == "off"
        conn.rollback()
        assert conn.execute("SELECT current_setting('synchronous_commit') AS s").fetchone()["s"] == "on"


def test_the_claim_without_flush_wait_leaves_the_sessions_setting_as_it_was(api, db_url):
    start(api, publish(api, tool("noop", NOOP)))
    with _app_connection(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT * FROM ledger_claim_untriggered('w', 1, 10, '{}')").fetchall()
        assert len(rows) == 1 and rows[0]["started"]
        assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"
        conn.execute("SELECT set_config('ledger.tenant_id', %s, false)", (str(api.tenant_id),))
        running = conn.execute("SELECT status FROM executions WHERE id = %s", (rows[0]["execution_id"],)).fetchone()
        assert running["status"] == "RUNNING"


def test_the_untriggered_claim_leaves_the_executions_of_a_tenant_with_a_status_trigger_to_the_claim_in_a_transaction(
        api, other_api, db_url):
    from trigger_helpers import create_trigger

    watched_action = publish(api, tool("noop", NOOP))
    create_trigger(api, watched_action, name="on_status", event="financial.ActionExecution.updated", condition="false")
    watched = start(api, watched_action)
    plain = start(other_api, publish(other_api, tool("noop", NOOP)))
    with _app_connection(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT * FROM ledger_claim_untriggered('w', 10, 10, '{}')").fetchall()
        assert [str(row["execution_id"]) for row in rows] == [plain["executionId"]]
        conn.execute("BEGIN")
        rows = conn.execute("SELECT * FROM ledger_claim_and_start('w', 10, 10, '{}')").fetchall()
        conn.execute("ROLLBACK")
        assert [str(row["execution_id"]) for row in rows] == [watched["executionId"]]
