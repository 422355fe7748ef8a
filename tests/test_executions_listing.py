"""`actions { executions(where, first, after) }` (DESIGN 15, "Listing executions"): top-level executions
unless `parentExecutionId` is given, narrowed by action, trigger and status, in (createdAt, id) order."""

from __future__ import annotations

import datetime
import uuid

import psycopg

from ledger.actions.lifecycle import has_unfinished_starts
from ledger.executions import records

from invoke_helpers import invoke, publish, tool
from trigger_helpers import new_client, runs

LEAF = 'def run(event):\n    return {}\n'
CALLER = 'def run(event):\n    tools.leaf({})\n    return {}\n'
BROKEN = 'def run(event):\n    fail("no")\n'


def test_without_a_parent_only_top_level_executions_are_listed(api):
    publish(api, tool("leaf", LEAF))
    caller = publish(api, tool("caller", CALLER, tools=[{"name": "leaf"}]))
    call = invoke(api, caller, {})
    assert [r["executionId"] for r in runs(api)] == [call["executionId"]]


def test_a_parent_lists_the_calls_beneath_it(api):
    leaf = publish(api, tool("leaf", LEAF))
    caller = publish(api, tool("caller", CALLER, tools=[{"name": "leaf"}]))
    call = invoke(api, caller, {})
    (child,) = runs(api, parentExecutionId=call["executionId"])
    assert child["actionId"] == leaf and child["depth"] == 1


def test_action_and_status_narrow_the_listing(api):
    ok = publish(api, tool("ok", LEAF))
    broken = publish(api, tool("broken", BROKEN))
    first = invoke(api, ok, {})
    invoke(api, broken, {})
    second = invoke(api, ok, {})
    assert [r["executionId"] for r in runs(api, actionId=ok)] == [first["executionId"], second["executionId"]]
    assert [r["actionId"] for r in runs(api, status="FAILED")] == [broken]


def test_pages_follow_the_cursor(api):
    ok = publish(api, tool("ok", LEAF))
    ids = [invoke(api, ok, {})["executionId"] for _ in range(3)]
    query = """query($after: String) { actions { executions(first: 2, after: $after) { executionId } } }"""
    page = api.gql(query)["actions"]["executions"]
    rest = api.gql(query, {"after": page[-1]["executionId"]})["actions"]["executions"]
    assert [r["executionId"] for r in page + rest] == ids


def test_the_listing_needs_its_index_and_shows_only_what_the_reader_may_select(api):
    ok = publish(api, tool("ok", LEAF))
    invoke(api, ok, {})
    _, token = new_client(api, "no_index", [{"effect": "ALLOW", "actions": ["SELECT"],
                                             "resources": ["financial.ActionExecution.document"]}])
    error = api.as_client(token).error("{ actions { executions { executionId } } }")
    assert error["extensions"]["code"] == "permission_denied"
    _, token = new_client(api, "index_only", [{"effect": "ALLOW", "actions": ["SELECT"],
                                               "resources": ["financial.ActionExecution.indexes.all"]}])
    assert api.as_client(token).gql("{ actions { executions { executionId } } }")["actions"]["executions"] == []


# ---------------------------------------------------------------------------- index paths
#
# A call writes every index of `executions` for each of its rows, so an index stays only while a query reads
# through it (migration 0013 dropped the one no query needed). These read each query as the code builds it
# (a scope that EXPLAINs instead of running), with sequential scans disabled, and require an index that
# serves it: one whose condition narrows by what the query narrows by (the primary key's tenant prefix
# alone is no such index), or, for the top-level listing, one whose order is the listing's (no Sort).


class _Explaining:
    """A scope whose statements are EXPLAINed on `conn` (answering nothing), their plans kept."""

    def __init__(self, conn, tenant_id):
        self.conn, self.tenant_id, self.plans = conn, tenant_id, []

    def _explain(self, sql, params):
        plan = "\n".join(r[0] for r in self.conn.execute("EXPLAIN " + sql, params))
        self.plans.append((sql, plan))

    def require(self, *args, **kwargs):
        pass

    def allows(self, *args, **kwargs):
        return True

    def one(self, sql, params=None):
        self._explain(sql, params)
        return {"created_at": datetime.datetime.now(datetime.timezone.utc)} if "SELECT created_at" in sql else None

    def all(self, sql, params=None):
        self._explain(sql, params)
        return []


def _explained_reads(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        scope = _Explaining(conn, uuid.uuid4())
        some = uuid.uuid4()
        for where in ({}, {"action_id": some}, {"status": "FAILED"}, {"trigger_id": some},
                      {"action_id": some, "trigger_id": some, "status": "SUCCEEDED"},
                      {"parent_execution_id": some}, {"parent_execution_id": some, "status": "FAILED"}):
            records.list_executions(scope, where, 50, None)
            records.list_executions(scope, where, 50, str(uuid.uuid4()))  # with its cursor's lookup
        records.children_of(scope, some, 1)
        has_unfinished_starts(scope, some)
        return scope.plans


def _index_conditions(plan: str) -> str:
    return " ".join(line for line in plan.splitlines() if "Index Cond" in line)


def test_every_read_of_executions_has_an_index_that_serves_it(db_url):
    plans = _explained_reads(db_url)
    assert len(plans) == 7 * 3 + 2
    for sql, plan in plans:
        assert "Seq Scan" not in plan, f"{sql}\n{plan}"
        if sql.startswith("SELECT created_at"):  # a cursor
            assert "(id = " in _index_conditions(plan), f"{sql}\n{plan}"
        elif "parent_execution_id = " in sql:
            assert "parent_execution_id = " in _index_conditions(plan), f"{sql}\n{plan}"
        elif "parent_execution_id IS NULL" in sql:
            assert "Sort" not in plan, f"{sql}\n{plan}"
        else:  # the action's unfinished starts
            assert "action_id = " in _index_conditions(plan), f"{sql}\n{plan}"
