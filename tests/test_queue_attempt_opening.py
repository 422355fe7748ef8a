"""A queued attempt's opening (queue/attempts.py, migration 0019): BEGIN and `ledger_open_attempt`, which
sets the tenant and the statement_timeout and reads the queue row, the execution with its client and the
action at its version, its jsonb values as text for json's scanner. It must read what the statements it
replaced read (the tenant's set_config, then the read with psycopg's jsonb loader), case by case."""

from __future__ import annotations

import time
import uuid

import psycopg

from ledger.actions.registry import HEADER_COLUMNS
from ledger.actions.triggers import TRIGGERS_VERSION_COLUMN
from ledger.db import pool
from ledger.db.migrate import MIGRATIONS_DIR
from ledger.executions.records import EXECUTION_COLUMNS
from ledger.queue import attempts

from invoke_helpers import publish, tool
from test_queue import ECHO, start, wait_for

# The attempt's read as it was before migration 0019, with its jsonb values loaded by psycopg.
_VERSION_COLUMNS = ("v_version", "v_definition", "v_enabled", "v_created_at")
_BEFORE = (
    "SELECT q.lease_token AS q_lease_token, q.cancel_requested AS q_cancel_requested, x.*, "
    + ", ".join(f"act.act_{column}" for column in HEADER_COLUMNS) + ", " + ", ".join(f"act.{column}" for column in _VERSION_COLUMNS)
    + " FROM execution_queue q LEFT JOIN LATERAL (SELECT "
    + ", ".join(f"e.{column.strip()}" for column in EXECUTION_COLUMNS.split(","))
    + ", e.client_claims, e.planned_action_id, c.id AS client_row_id, c.name AS client_name,"
    f" c.enabled AS client_enabled, c.policies AS client_policies, {TRIGGERS_VERSION_COLUMN}"
    " FROM executions e LEFT JOIN clients c ON c.tenant_id = e.tenant_id AND c.id = e.client_id"
    " WHERE e.tenant_id = q.tenant_id AND e.id = q.execution_id) x ON true"
    " LEFT JOIN LATERAL (SELECT " + ", ".join(f"a.{column} AS act_{column}" for column in HEADER_COLUMNS)
    + ", v.version AS v_version, v.definition AS v_definition, v.enabled AS v_enabled, v.created_at AS v_created_at"
    " FROM actions a LEFT JOIN action_versions v ON v.tenant_id = a.tenant_id AND v.action_id = a.id"
    " AND v.version = x.action_version WHERE a.tenant_id = x.tenant_id AND a.id = x.action_id) act ON true"
    " WHERE q.tenant_id = %s AND q.execution_id = %s")

# Values whose reading a change of loader could alter: at the ends of 64 bits, floats, escapes, non-ASCII
# text, keys jsonb reorders, nesting.
AWKWARD = {"big": 2 ** 64 - 1, "negative": -(2 ** 63), "float": 0.1, "tiny": 1e-300,
           "text": "é \u2028 \"quoted\" \\ tab\t", "emoji": "\U0001F600", "nested": [[{"b": 1, "a": [None, True]}]],
           "zz": {}, "a": []}


def _split_before(row: dict | None) -> tuple:
    """The queue row, the execution and the action row of the read before 0019, as attempts split them."""
    if row is None:
        return None, None, None
    queue_row = {"lease_token": row["q_lease_token"], "cancel_requested": row["q_cancel_requested"]}
    if row["id"] is None:
        return queue_row, None, None
    execution = {key: row[key] for key in attempts._EXECUTION_KEYS}
    if row["act_id"] is None:
        return queue_row, execution, None
    action_row = {column: row[f"act_{column}"] for column in HEADER_COLUMNS}
    for column in _VERSION_COLUMNS:
        action_row[column] = row[column]
    return queue_row, execution, action_row


def _both(services, tenant_id: uuid.UUID, execution_id: uuid.UUID) -> tuple[tuple, tuple, int]:
    """(the opening's split, the split of the read before it, the statement_timeout the opening set, in ms)."""
    deadline = time.monotonic() + 60
    with services.db.transaction(tenant_id, deadline=deadline,
                                 opener=(attempts._OPEN_ATTEMPT, (execution_id,))) as conn:
        opened = attempts._split_opening(conn.ledger_first[0])
        timeout = int(conn.execute("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'").fetchone()["setting"])
    with services.db.transaction(tenant_id, deadline=deadline, first=[(_BEFORE, (tenant_id, execution_id))]) as conn:
        before = _split_before(conn.ledger_first[0])
    return opened, before, timeout


def _owner(db_url: str) -> psycopg.Connection:
    return psycopg.connect(db_url, autocommit=True)


def test_the_opening_reads_a_queued_execution_as_the_statements_it_replaced(api, services):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = uuid.UUID(start(api, action_id, AWKWARD)["executionId"])
    opened, before, timeout = _both(services, api.tenant_id, execution_id)
    assert opened == before
    queue_row, execution, action_row = opened
    assert queue_row == {"lease_token": None, "cancel_requested": False}
    assert execution["input"] == AWKWARD and execution["event"]["data"] == AWKWARD
    assert type(execution["input"]["big"]) is int
    assert action_row["v_definition"]["config"]["src"] == ECHO
    assert 50_000 < timeout <= 60_000  # the transaction's deadline, a minute away


def test_the_opening_reads_values_beyond_64_bits_as_the_statements_it_replaced(api, services, db_url):
    # Stored exactly as received even where validation refuses them (DESIGN 7): a row may hold them.
    action_id = publish(api, tool("echo", ECHO))
    execution_id = uuid.UUID(start(api, action_id, {"a": 1})["executionId"])
    huge = '{"big": 18446744073709551616123, "more": [-36893488147419103232, 1.5e300, 0.30000000000000004]}'
    with _owner(db_url) as owner:
        owner.execute("UPDATE executions SET input = %s::jsonb, client_claims = %s::jsonb WHERE tenant_id = %s AND id = %s",
                      (huge, huge, api.tenant_id, execution_id))
    opened, before, _ = _both(services, api.tenant_id, execution_id)
    assert opened == before
    assert opened[1]["input"]["big"] == 18446744073709551616123 and opened[1]["client_claims"] == opened[1]["input"]



def test_the_opening_reads_a_leased_row_a_missing_version_a_missing_client_and_a_trigger_version_as_before(
        api, services, db_url):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = uuid.UUID(start(api, action_id, {"a": 1})["executionId"])
    with _owner(db_url) as owner:
        owner.execute("UPDATE execution_queue SET lease_token = gen_random_uuid(), cancel_requested = true"
                      " WHERE tenant_id = %s AND execution_id = %s", (api.tenant_id, execution_id))
        owner.execute("INSERT INTO trigger_versions (tenant_id, version) VALUES (%s, 7)"
                      " ON CONFLICT (tenant_id) DO UPDATE SET version = 7", (api.tenant_id,))
    opened, before, _ = _both(services, api.tenant_id, execution_id)
    assert opened == before and opened[0]["cancel_requested"] and opened[1]["triggers_version"] == 7
    with _owner(db_url) as owner:
        owner.execute("UPDATE executions SET action_version = 99, client_id = %s WHERE tenant_id = %s AND id = %s",
                      (uuid.uuid4(), api.tenant_id, execution_id))
    opened, before, _ = _both(services, api.tenant_id, execution_id)
    assert opened == before
    _, execution, action_row = opened
    assert execution["client_row_id"] is None and execution["client_policies"] is None
    assert action_row["v_version"] is None and action_row["v_definition"] is None


def test_the_opening_finds_no_row_for_a_gone_queue_row_nor_for_another_tenants_execution(api, other_api, services,
                                                                                          db_url):
    assert _both(services, api.tenant_id, uuid.uuid4())[:2] == ((None, None, None), (None, None, None))
    theirs = publish(other_api, tool("echo", ECHO))
    their_execution = uuid.UUID(start(other_api, theirs, {"a": 1})["executionId"])
    assert _both(services, api.tenant_id, their_execution)[:2] == ((None, None, None), (None, None, None))
    action_id = publish(api, tool("echo", ECHO))
    execution_id = uuid.UUID(start(api, action_id, {"a": 1})["executionId"])
    with _owner(db_url) as owner:
        owner.execute("DELETE FROM execution_queue WHERE tenant_id = %s AND execution_id = %s",
                      (api.tenant_id, execution_id))
    assert _both(services, api.tenant_id, execution_id)[:2] == ((None, None, None), (None, None, None))


def test_the_opening_has_every_column_of_an_execution_record():
    # ledger_open_attempt names the execution's columns itself: one added to EXECUTION_COLUMNS needs a
    # migration that adds it to the function too, or every attempt fails on its missing key.
    text = " ".join(path.read_text() for path in sorted(MIGRATIONS_DIR.glob("*.sql"))
                    if "FUNCTION ledger_open_attempt" in path.read_text())
    returned = text[text.rindex("RETURNS TABLE ("):]
    returned = returned[:returned.index(")\n")]
    names = {part.split()[0] for part in returned[len("RETURNS TABLE ("):].replace("\n", " ").split(",")}
    assert set(attempts._EXECUTION_KEYS) <= names


def test_an_attempt_opens_with_one_statement_after_begin(api, services, worker, monkeypatch):
    opened: list[list] = []
    original = pool.begin_on_prepared

    def spy(conn, block, statements):
        opened.append([sql for sql, _params in statements])
        return original(conn, block, statements)

    monkeypatch.setattr(pool, "begin_on_prepared", spy)
    action_id = publish(api, tool("echo", ECHO))
    done = wait_for(api, start(api, action_id, {"a": 1})["executionId"])
    assert done["status"] == "SUCCEEDED"
    assert [attempts._OPEN_ATTEMPT] in opened


def test_a_started_executions_awkward_input_reaches_its_program_and_its_record_exactly(api, worker):
    action_id = publish(api, tool("echo", ECHO))
    done = wait_for(api, start(api, action_id, AWKWARD)["executionId"])
    assert done["status"] == "SUCCEEDED", done
    assert done["invocation"]["output"] == {"echo": AWKWARD}
