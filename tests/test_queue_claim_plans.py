"""The claim with cached plans (migration 0018) claims what the claim of migration 0015 claimed, and leaves
the queue, the leases and the executions as it left them, over one queue holding every kind of row a claim
meets: due and not yet due, held, lapsed, lapsed without a lease row, a cancel pending, a tenant with a status
trigger, finished and long-expired leases. The 0015 claim runs here as the reference (`pg_temp`), each claim
in a transaction rolled back, both on the same rows; what differs only by chance (the new lease tokens, the
clock) is compared by what it stands for.

Every time is set far from the moment the claims run (a held lease expires in an hour, a lapsed one expired
a minute before the rows were written), so that no row changes kind however long the suite took to get here."""

from __future__ import annotations

import datetime
import re
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from invoke_helpers import publish, tool
from trigger_helpers import create_trigger

NOOP = "def run(event):\n    return {}\n"

# Migration 0015's ledger_claim_and_start (0014's file), verbatim but for its name and SECURITY DEFINER (the
# test connects as the owner).
REFERENCE_CLAIM = """
CREATE FUNCTION pg_temp.reference_claim(worker text, batch integer, lease_seconds double precision, finished uuid[],
                                       untriggered_only boolean DEFAULT false)
  RETURNS TABLE (tenant_id uuid, execution_id uuid, attempt integer, lease_token uuid, enqueued_at timestamptz,
                 run_at timestamptz, started boolean, previous_status text, triggers_version bigint)
  LANGUAGE sql SET search_path = public
AS $$
  WITH dropped AS (
    DELETE FROM execution_leases l
     WHERE l.lease_token = ANY(finished)
        OR (l.expires_at < clock_timestamp() - interval '10 minutes'
            AND NOT EXISTS (SELECT 1 FROM execution_queue q WHERE q.lease_token = l.lease_token))
  ), triggered AS (
    SELECT t.tenant_id FROM triggers t
     WHERE t.event = 'financial.ActionExecution.updated' AND t.enabled AND NOT t.deleted
  ), lapsed AS (
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
     WHERE c.lease_token IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM execution_leases h
                        WHERE h.lease_token = c.lease_token AND h.expires_at >= clock_timestamp())
       AND NOT ledger_lease_held(c.lease_token)
       AND NOT (untriggered_only AND c.tenant_id IN (SELECT tenant_id FROM triggered))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), ready AS (
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
     WHERE c.lease_token IS NULL AND c.run_at <= clock_timestamp()
       AND NOT (untriggered_only AND c.tenant_id IN (SELECT tenant_id FROM triggered))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), picked AS (
    SELECT * FROM (SELECT * FROM lapsed UNION ALL SELECT * FROM ready) due ORDER BY run_at LIMIT batch
  ), claimed AS (
    UPDATE execution_queue q
       SET lease_token = gen_random_uuid(), lease_owner = worker, claimed_at = clock_timestamp(),
           attempt = q.attempt + 1
      FROM picked
     WHERE q.tenant_id = picked.tenant_id AND q.execution_id = picked.execution_id
    RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at, q.cancel_requested,
              picked.old_token
  ), old_leases AS (
    DELETE FROM execution_leases l USING claimed WHERE l.lease_token = claimed.old_token
  ), leased AS (
    INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at, cancel_requested)
    SELECT claimed.lease_token, claimed.tenant_id, claimed.execution_id,
           clock_timestamp() + make_interval(secs => lease_seconds), claimed.cancel_requested FROM claimed
  ), prior AS (
    SELECT e.tenant_id, e.id, e.status FROM executions e
      JOIN claimed ON e.tenant_id = claimed.tenant_id AND e.id = claimed.execution_id
  ), running AS (
    UPDATE executions e SET status = 'RUNNING', attempts = e.attempts + 1, updated_at = now()
      FROM claimed
     WHERE e.tenant_id = claimed.tenant_id AND e.id = claimed.execution_id
       AND e.status IN ('QUEUED', 'RUNNING') AND NOT claimed.cancel_requested
    RETURNING e.tenant_id, e.id
  )
  SELECT claimed.tenant_id, claimed.execution_id, claimed.attempt, claimed.lease_token, claimed.enqueued_at,
         claimed.run_at, running.id IS NOT NULL, prior.status,
         (SELECT v.version FROM trigger_versions v WHERE v.tenant_id = claimed.tenant_id)
    FROM claimed
    LEFT JOIN prior ON prior.tenant_id = claimed.tenant_id AND prior.id = claimed.execution_id
    LEFT JOIN running ON running.tenant_id = claimed.tenant_id AND running.id = claimed.execution_id
$$;
"""



def _queue(conn: psycopg.Connection, watched: uuid.UUID, plain: uuid.UUID) -> dict:
    """Bare queue, lease and execution rows (no foreign keys checked) of every kind; what it names."""
    conn.execute("SET session_replication_role = replica")
    now = conn.execute("SELECT clock_timestamp() AS now").fetchone()["now"]
    names: dict = {}

    def execution(tenant: uuid.UUID, name: str, status: str = "QUEUED", *, run_in: float = -60.0,
                  lease: str | None = None, cancel: bool = False) -> uuid.UUID:
        execution_id = uuid.uuid4()
        names[execution_id] = name
        conn.execute("INSERT INTO executions (tenant_id, id, action_id, action_version, status, root_execution_id,"
                     " client_id, event, started, attempts) VALUES (%s, %s, %s, 1, %s, %s, %s, '{}', true, 1)",
                     (tenant, execution_id, uuid.uuid4(), status, execution_id, uuid.uuid4()))
        token = None
        if lease is not None:
            token = uuid.uuid4()
            names[token] = f"{name}'s lease"
            if lease != "missing":
                expires = now + datetime.timedelta(seconds={"held": 3600, "lapsed": -60, "long lapsed": -3600}[lease])
                conn.execute("INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at)"
                             " VALUES (%s, %s, %s, %s)", (token, tenant, execution_id, expires))
        conn.execute("INSERT INTO execution_queue (tenant_id, execution_id, run_at, attempt, lease_token, lease_owner,"
                     " claimed_at, cancel_requested, enqueued_at) VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s)",
                     (tenant, execution_id, now + datetime.timedelta(seconds=run_in), token,
                      "old" if token else None, now if token else None, cancel, now - datetime.timedelta(hours=1)))
        return execution_id

    # Every run_at distinct: which of two equal ones a LIMIT takes is the planner's choice.
    for tenant, label, offset in ((plain, "plain", 0.0), (watched, "watched", 0.5)):
        for i in range(3):
            execution(tenant, f"{label} due {i}", run_in=-50.0 + i + offset)
        execution(tenant, f"{label} later", run_in=3600.0 + offset)
        execution(tenant, f"{label} held", "RUNNING", run_in=-70.0 + offset, lease="held")
        execution(tenant, f"{label} lapsed", "RUNNING", run_in=-65.0 + offset, lease="lapsed")
        execution(tenant, f"{label} lapsed without its lease row", "RUNNING", run_in=-64.0 + offset, lease="missing")
        # Its lease row outlived the ten minutes after which a lease no queue row refers to is dropped.
        execution(tenant, f"{label} lapsed long ago", "RUNNING", run_in=-40.0 + offset, lease="long lapsed")
        execution(tenant, f"{label} cancel pending", run_in=-55.0 + offset, cancel=True)
        execution(tenant, f"{label} already cancelled", "CANCELLED", run_in=-54.0 + offset)
    finished = uuid.uuid4()
    names[finished] = "a finished lease"
    conn.execute("INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at)"
                 " VALUES (%s, %s, %s, %s)", (finished, plain, uuid.uuid4(), now + datetime.timedelta(seconds=3600)))
    orphan = uuid.uuid4()
    names[orphan] = "an orphan long expired"
    conn.execute("INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at)"
                 " VALUES (%s, %s, %s, %s)", (orphan, plain, uuid.uuid4(), now - datetime.timedelta(hours=1)))
    conn.execute("SET session_replication_role = origin")
    conn.commit()
    names["finished"] = finished
    return names


def _outcome(conn: psycopg.Connection, call: str, args: tuple, names: dict) -> dict:
    """A claim's rows and the tables it leaves, in a transaction rolled back; a new lease token is named
    by the execution it leases."""
    rows = conn.execute(call, args).fetchall()
    tokens = {row["lease_token"]: f"new lease of {names[row['execution_id']]}" for row in rows}

    def name(value):
        return tokens.get(value) or names.get(value, value)

    claimed = sorted(({key: name(value) for key, value in row.items()} for row in rows), key=str)
    queue = sorted(((name(r["execution_id"]), r["attempt"], name(r["lease_token"]), r["lease_owner"],
                     r["cancel_requested"], r["run_at"]) for r in conn.execute("SELECT * FROM execution_queue")),
                   key=str)
    leases = sorted(((name(r["lease_token"]), name(r["execution_id"]), r["cancel_requested"],
                      r["lease_token"] in tokens or r["expires_at"]) for r in conn.execute("SELECT * FROM execution_leases")),
                    key=str)
    executions = sorted((name(r["id"]), r["status"], r["attempts"])
                        for r in conn.execute("SELECT id, status, attempts FROM executions").fetchall())
    conn.rollback()
    return {"claimed": claimed, "queue": queue, "leases": leases, "executions": executions}


@pytest.mark.parametrize("untriggered_only", [False, True])
@pytest.mark.parametrize("batch", [0, 1, 2, 3, 20])
def test_the_claim_with_cached_plans_claims_and_leaves_what_the_claim_it_replaced_did(
        api, other_api, db_url, batch, untriggered_only):
    create_trigger(api, publish(api, tool("noop", NOOP)), name="on_status",
                   event="financial.ActionExecution.updated", condition="false")
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        conn.execute("DELETE FROM execution_queue")
        conn.execute("DELETE FROM execution_leases")
        names = _queue(conn, api.tenant_id, other_api.tenant_id)
        conn.execute(REFERENCE_CLAIM)
        conn.commit()
        args = ("w", batch, 30.0, [names["finished"]], untriggered_only)
        # Twice each, so that the second call of the cached claim runs on plans it made on the first.
        for _ in range(2):
            expected = _outcome(conn, "SELECT * FROM pg_temp.reference_claim(%s, %s, %s, %s, %s)", args, names)
            actual = _outcome(conn, "SELECT * FROM ledger_claim_and_start(%s, %s, %s, %s, %s)", args, names)
            assert actual == expected
    if batch >= 3:
        claimed = {row["execution_id"] for row in expected["claimed"]}
        assert "plain lapsed" in claimed and "plain lapsed without its lease row" in claimed
    if batch >= 20:
        assert "plain lapsed long ago" in claimed


def test_the_claims_plans_made_on_an_empty_queue_read_a_full_one_by_its_indexes(api, db_url):
    """A worker's first claims meet an empty queue, and their plans are kept: with 1,000 due rows (and as
    many executions) they still read the due rows in run_at order from their index, write each row by its
    key, and compile nothing (a disabled node's cost would otherwise set off JIT)."""
    plans: list[str] = []
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = notice")
        for _ in range(6):
            assert conn.execute("SELECT * FROM ledger_claim_and_start('w', 2, 30, '{}', true)").fetchall() == []
        conn.execute("SET session_replication_role = replica")
        ids = [uuid.uuid4() for _ in range(1000)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO executions (tenant_id, id, action_id, action_version, status,"
                            " root_execution_id, client_id, event, started) VALUES (%s, %s, %s, 1, 'QUEUED', %s, %s,"
                            " '{}', true)", [(api.tenant_id, i, uuid.uuid4(), i, uuid.uuid4()) for i in ids])
            cur.executemany("INSERT INTO execution_queue (tenant_id, execution_id, run_at)"
                            " VALUES (%s, %s, now() - make_interval(secs => %s))",
                            [(api.tenant_id, i, 1000 - n) for n, i in enumerate(ids)])
        conn.execute("SET session_replication_role = origin")
        conn.execute("SET auto_explain.log_min_duration = 0")
        rows = conn.execute("SELECT * FROM ledger_claim_and_start('w', 2, 30, '{}', true)").fetchall()
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert [row["execution_id"] for row in rows] == ids[:2]
    assert all(row["started"] for row in rows)
    text = "\n".join(plans)
    assert "Index Scan using execution_queue_ready" in text
    assert "Seq Scan on execution_queue" not in text and "Seq Scan on executions" not in text
    assert "JIT" not in text


def test_the_claims_walk_of_ready_rows_ends_at_the_first_row_not_yet_due(api, db_url):
    """Rows retried with a backoff wait in the queue behind the due ones: the walk's index condition is
    the claim's clock, read once, so it stops at the first row not yet due instead of filtering every
    waiting row whenever fewer than `batch` are due."""
    plans: list[str] = []
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = notice")
        conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET session_replication_role = replica")
        ids = [uuid.uuid4() for _ in range(500)]
        with conn.cursor() as cur:
            # Two due (an hour ago and a minute ago), the rest due from an hour on.
            cur.executemany("INSERT INTO execution_queue (tenant_id, execution_id, run_at)"
                            " VALUES (%s, %s, now() + make_interval(secs => %s))",
                            [(api.tenant_id, i, -3600 if n == 0 else -60 if n == 1 else 3600 + n)
                             for n, i in enumerate(ids)])
        conn.execute("SET session_replication_role = origin")
        conn.execute("ANALYZE execution_queue")
        conn.execute("SET auto_explain.log_min_duration = 0")
        rows = conn.execute("SELECT * FROM ledger_claim_and_start('w', 4, 30, '{}', true)").fetchall()
        conn.execute("SET auto_explain.log_min_duration = -1")
    assert [row["execution_id"] for row in rows] == ids[:2]
    walk = next(plan for plan in plans if "ready AS" in plan)
    scan = walk[walk.index("Index Scan using execution_queue_ready"):]
    assert "actual time" in scan and "rows=2 loops=1" in scan.splitlines()[0]
    assert "Rows Removed by Filter" not in scan.split("->")[0]


def test_the_untriggered_claim_reads_the_tenants_with_a_status_trigger_once_for_both_walks(api, other_api, db_url):
    """With attempts running (rows in the walk of lapsed leases) both walks test the tenant of their rows:
    they share one read of the triggers table (migration 0020), not one each."""
    create_trigger(api, publish(api, tool("noop", NOOP)), name="on_status",
                   event="financial.ActionExecution.updated", condition="false")
    plans: list[str] = []
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("DELETE FROM execution_queue")
        conn.execute("DELETE FROM execution_leases")
        _queue(conn, api.tenant_id, other_api.tenant_id)
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = notice")
        conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("BEGIN")
        rows = conn.execute("SELECT * FROM ledger_claim_and_start('w', 2, 30, '{}', true)").fetchall()
        conn.execute("ROLLBACK")
    assert len(rows) == 2
    walk = next(plan for plan in plans if "lapsed AS" in plan)
    plan = walk[walk.index("Limit  (cost"):]
    # The table's own scans (not its index's, nor the CTE's "triggered").
    assert len(re.findall(r"Scan on triggers\b", plan)) == 1
    # Both walks did test their rows' tenants (else one read would prove nothing).
    tests = [line for line in plan.splitlines() if "Scan on triggered" in line]
    assert len(tests) == 2 and not any("never executed" in line for line in tests)
