"""`children` per attempt, under their index, and what a rollback left (DESIGN 5 and 17)."""

from __future__ import annotations

import time
import uuid

import pytest

from helpers import create_account
from invoke_helpers import invoke, publish, tool
from test_queue import start, wait_for, worker  # noqa: F401  (the worker fixture)
from test_registry import _limited_token

TREE = """query($id: UUID!) { actions { execution(id: $id) { executionId status attempts rolledBack
  children { executionId status callSequence rolledBack actionId
             children { executionId status callSequence rolledBack } }
  invocations { attempt error { code } children { executionId status callSequence rolledBack } } } } }"""
CHILDREN_ONLY = """query($id: UUID!) { actions { execution(id: $id) { executionId
  children { executionId invocation { output } } } } }"""
INVOCATION_CHILDREN = """query($id: UUID!) { actions { execution(id: $id) { executionId
  invocations { attempt children { executionId } } } } }"""


def tree(api, execution_id: str) -> dict:
    return api.gql(TREE, {"id": execution_id})["actions"]["execution"]


# ---------------------------------------------------------------------------- the index (item 9)


@pytest.fixture
def document_only(api):
    """A client allowed the execution documents but denied every execution index."""
    return api.as_client(_limited_token(api, [
        {"effect": "ALLOW", "actions": ["SELECT", "INSERT", "INVOKE"],
         "resources": ["financial.Action.*", "financial.ActionExecution.*"]},
        {"effect": "DENY", "actions": ["SELECT"], "resources": ["financial.ActionExecution.indexes.*"]},
    ]))


def test_children_need_the_children_index(api, document_only):
    action_id = publish(api, tool("celer", 'def run(event):\n    return cel("6 * 7", {})\n'))
    parent = invoke(api, action_id)["executionId"]
    error = document_only.error(CHILDREN_ONLY, {"id": parent})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.ActionExecution.indexes.children" in error["extensions"]["hint"]
    error = document_only.error(INVOCATION_CHILDREN, {"id": parent})
    assert error["extensions"]["code"] == "permission_denied"
    # The execution itself, read by id, stays readable under its document grant.
    read = document_only.gql("query($id: UUID!) { actions { execution(id: $id) { executionId } } }", {"id": parent})
    assert read["actions"]["execution"]["executionId"] == parent


def test_children_are_read_with_the_index_granted(api):
    action_id = publish(api, tool("celer", 'def run(event):\n    return cel("6 * 7", {})\n'))
    parent = invoke(api, action_id)["executionId"]
    allowed = api.as_client(_limited_token(api, [
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.ActionExecution.*"]}]))
    children = allowed.gql(CHILDREN_ONLY, {"id": parent})["actions"]["execution"]["children"]
    assert [c["invocation"]["output"] for c in children] == [{"value": 42}]


# ---------------------------------------------------------------------------- per attempt (item 12)


def test_a_started_execution_failing_every_attempt_shows_the_latest_attempts_children_rolled_back(api, worker):  # noqa: F811
    src = ('def run(event):\n'
           '    graphql("query { viewer { clientName } }")\n'
           '    cel("1 + 1", {})\n'
           '    fail("every time")\n')
    doc = tool("doomed", src)
    doc["execution"] = {"maxAttempts": 3, "backoffSeconds": 0.05}
    action_id = publish(api, doc)
    execution_id = start(api, action_id)["executionId"]
    assert wait_for(api, execution_id)["status"] == "FAILED"
    read = tree(api, execution_id)
    assert read["attempts"] == 3 and read["rolledBack"] is False
    assert [(c["callSequence"], c["status"], c["rolledBack"]) for c in read["children"]] == [
        (1, "SUCCEEDED", True), (2, "SUCCEEDED", True)]
    per_attempt = [[c["executionId"] for c in i["children"]] for i in read["invocations"]]
    assert [i["attempt"] for i in read["invocations"]] == [1, 2, 3]
    assert all(len(ids) == 2 for ids in per_attempt)
    assert len({child for ids in per_attempt for child in ids}) == 6  # each attempt its own calls
    assert per_attempt[-1] == [c["executionId"] for c in read["children"]]
    for invocation in read["invocations"]:
        assert [(c["callSequence"], c["rolledBack"]) for c in invocation["children"]] == [(1, True), (2, True)]


def test_a_started_execution_succeeding_on_a_later_attempt_shows_that_attempts_children(api, worker):  # noqa: F811
    # The program fails until an account named "go" exists; the test creates it after the first attempt.
    src = ('def run(event):\n'
           '    names = [a["name"] for a in graphql("query { financial { accounts { name } } }")["financial"]["accounts"]]\n'
           '    if "go" not in names:\n'
           '        fail("not yet")\n'
           '    return cel("1 + 1", {})\n')
    doc = tool("patient", src)
    doc["execution"] = {"maxAttempts": 3, "backoffSeconds": 1.0}
    action_id = publish(api, doc)
    execution_id = start(api, action_id)["executionId"]
    deadline = time.monotonic() + 10
    while not tree(api, execution_id)["invocations"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    create_account(api, "go")
    assert wait_for(api, execution_id)["status"] == "SUCCEEDED"
    read = tree(api, execution_id)
    # Usually two attempts; on a loaded machine the account may come after a second failed one.
    assert read["attempts"] >= 2
    assert [(c["callSequence"], c["status"], c["rolledBack"]) for c in read["children"]] == [
        (1, "SUCCEEDED", False), (2, "SUCCEEDED", False)]
    assert [[(c["callSequence"], c["rolledBack"]) for c in i["children"]] for i in read["invocations"]] == [
        [(1, True)]] * (read["attempts"] - 1) + [[(1, False), (2, False)]]


def test_an_invoked_tool_whose_failed_child_it_tolerates_keeps_its_siblings(api):
    publish(api, tool("broken", 'def run(event):\n    fail("leaf broke")\n'))
    caller = publish(api, tool("caller", 'def run(event):\n    a = cel("1", {})\n'
                                         '    r = tools.broken({}, check=False)\n'
                                         '    return cel("2", {})\n', tools=[{"name": "broken"}]))
    result = invoke(api, caller)
    assert result["status"] == "SUCCEEDED"
    read = tree(api, result["executionId"])
    assert read["rolledBack"] is False
    assert [(c["callSequence"], c["status"], c["rolledBack"]) for c in read["children"]] == [
        (1, "SUCCEEDED", False), (2, "FAILED", False), (3, "SUCCEEDED", False)]
    assert [[(c["callSequence"], c["rolledBack"]) for c in i["children"]] for i in read["invocations"]] == [
        [(1, False), (2, False), (3, False)]]


def test_a_parent_failing_after_a_successful_child_marks_the_child_and_its_children_rolled_back(api):
    publish(api, tool("leaf", 'def run(event):\n    return cel("3", {})\n'))
    caller = publish(api, tool("caller", 'def run(event):\n    tools.leaf({})\n    fail("after the child")\n',
                               tools=[{"name": "leaf"}]))
    result = invoke(api, caller)
    assert result["status"] == "FAILED"
    read = tree(api, result["executionId"])
    assert read["rolledBack"] is False
    [child] = read["children"]
    assert (child["status"], child["rolledBack"]) == ("SUCCEEDED", True)
    assert [(g["status"], g["rolledBack"]) for g in child["children"]] == [("SUCCEEDED", True)]
    assert tree(api, child["executionId"])["rolledBack"] is True


def test_a_failed_grandparent_rolls_back_a_tolerated_subtree(api):
    publish(api, tool("leaf", 'def run(event):\n    return 1\n'))
    publish(api, tool("mid", 'def run(event):\n    tools.leaf({})\n    fail("mid broke")\n', tools=[{"name": "leaf"}]))
    caller = publish(api, tool("caller", 'def run(event):\n    return tools.mid({}, check=False)["status"]\n',
                               tools=[{"name": "mid"}]))
    result = invoke(api, caller)
    assert result["status"] == "SUCCEEDED"
    read = tree(api, result["executionId"])
    [mid] = read["children"]
    # The failed call itself says FAILED; what it made beneath it is rolled back.
    assert (mid["status"], mid["rolledBack"]) == ("FAILED", False)
    assert [(g["status"], g["rolledBack"]) for g in mid["children"]] == [("SUCCEEDED", True)]


# ---------------------------------------------------------------------------- rows recorded before 0006


def test_the_migration_assigns_attempts_and_rolled_back_to_rows_recorded_before_it(pg_admin_url, tmp_path):
    """Rows written before 0006: children get their parent's attempt and rolledBack, for every tenant, even
    when the migrating owner role is subject to row level security (FORCE)."""
    import datetime
    import shutil

    import psycopg
    from psycopg import sql
    from psycopg.types.json import Jsonb

    from ledger.auth.clients import create_tenant
    from ledger.db.migrate import MIGRATIONS_DIR, apply_migrations

    name, owner = f"ledger_test_migration_{uuid.uuid4().hex[:8]}", f"ledger_owner_{uuid.uuid4().hex[:8]}"
    before, through_0006 = tmp_path / "before", tmp_path / "through_0006"
    before.mkdir()
    through_0006.mkdir()
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if path.name < "0006":
            shutil.copy(path, before / path.name)
        if path.name < "0007":  # the later ones are not this test's subject
            shutil.copy(path, through_0006 / path.name)
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(owner)))
    url = psycopg.conninfo.make_conninfo(pg_admin_url, dbname=name)
    try:
        apply_migrations(url, before)
        tenant, client = create_tenant(url, "old")
        t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        second = datetime.timedelta(seconds=1)
        started, invoked = uuid.uuid4(), uuid.uuid4()
        # started: attempt 1 failed after child a1; attempt 2 succeeded after child a2, which made a grandchild.
        # invoked: failed after child b1.
        a1, a2, grandchild, b1 = (uuid.uuid4() for _ in range(4))
        rows = [(started, None, None, "SUCCEEDED", 2, t0), (a1, started, 1, "SUCCEEDED", 1, t0 + second),
                (a2, started, 1, "SUCCEEDED", 1, t0 + 3 * second), (grandchild, a2, 1, "SUCCEEDED", 1, t0 + 3 * second),
                (invoked, None, None, "FAILED", 1, t0), (b1, invoked, 1, "SUCCEEDED", 1, t0)]
        invocations = [(started, 1, t0, {"code": "action_failure"}), (started, 2, t0 + 2 * second, None),
                       (a1, 1, t0, None), (a2, 1, t0, None), (grandchild, 1, t0, None),
                       (invoked, 1, t0, {"code": "action_failure"}), (b1, 1, t0, None)]
        with psycopg.connect(url, autocommit=True) as conn:
            for id_, parent, sequence, status, attempts, created in rows:
                conn.execute("INSERT INTO executions (tenant_id, id, action_id, action_version, status,"
                             " parent_execution_id, root_execution_id, call_sequence, attempts, client_id, event,"
                             " created_at) VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s, %s, '{}', %s)",
                             (tenant, id_, uuid.uuid4(), status, parent, parent or id_, sequence, attempts, client,
                              created))
            for id_, attempt, started_at, error in invocations:
                conn.execute("INSERT INTO invocations (tenant_id, execution_id, attempt, error, started_at)"
                             " VALUES (%s, %s, %s, %s, %s)", (tenant, id_, attempt, Jsonb(error) if error else None,
                                                              started_at))
            # The migrating role owns the tables but is no superuser: FORCE applies row level security to it.
            for table in ("executions", "invocations", "ledger_schema_migrations"):
                conn.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.Identifier(table), sql.Identifier(owner)))
            conn.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(owner)))
        apply_migrations(psycopg.conninfo.make_conninfo(url, options=f"-c role={owner}"), through_0006)
        with psycopg.connect(url) as conn:
            found = {r[0]: (r[1], r[2]) for r in conn.execute(
                "SELECT id, parent_attempt, rolled_back FROM executions WHERE parent_execution_id IS NOT NULL")}
            forced = {r[0] for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relforcerowsecurity AND relname IN ('executions', 'invocations')")}
        assert found == {a1: (1, True), a2: (2, False), grandchild: (1, False), b1: (1, True)}
        assert forced == {"executions", "invocations"}
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(owner)))


def test_a_nested_invoke_inside_a_graphql_call_that_failed_is_rolled_back(api):
    leaf = publish(api, tool("leaf", 'def run(event):\n    return 1\n'))
    document = ('"""mutation($leaf: UUID!, $eid: UUID!, $t: UUID!, $nowhere: UUID!) {'
                ' actions { invokeAction(id: $leaf, input: {executionId: $eid, input: {}}) { status } }'
                ' financial { createTransfer(id: $t, input: {fromAccountId: $nowhere, toAccountId: $nowhere, amount: 1})'
                ' { id } } }"""')
    src = ('def run(event):\n    d = event["data"]\n'
           f'    r = graphql({document}, variables={{"leaf": d["leaf"], "eid": d["eid"], "t": d["t"], "nowhere": d["t"]}},'
           ' check=False)\n'
           '    return [e["extensions"]["code"] for e in r["errors"]]\n')
    caller = publish(api, tool("caller", src))
    nested = str(uuid.uuid4())
    result = invoke(api, caller, {"leaf": leaf, "eid": nested, "t": str(uuid.uuid4())})
    assert result["status"] == "SUCCEEDED" and result["invocation"]["output"] == ["invalid_input"], result["invocation"]
    read = tree(api, result["executionId"])
    statuses = {c["executionId"]: (c["status"], c["rolledBack"]) for c in read["children"]}
    # The graphql() call failed on its second field, which took the nested call's writes with it.
    assert statuses[nested] == ("SUCCEEDED", True)
    assert sorted(statuses.values()) == [("FAILED", False), ("SUCCEEDED", True)]
