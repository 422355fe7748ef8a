"""Triggers fire in the writing transaction (DESIGN 15): what a record event starts, under whose authority,
how deep, and what it never does (fail the write, outlive a rollback, cross a tenant or a policy)."""

from __future__ import annotations

import uuid

import pytest

from helpers import CREATE_TRANSFER, balance, create_account, funded_account, transfer
from invoke_helpers import ALL_ACCESS, invoke, publish, tool
from test_metrics import scrape, value
from test_queue import start, wait_for, worker  # noqa: F401 - worker is a fixture
from trigger_helpers import DELETE_TRIGGER, REVIEW, create_trigger, new_client, runs, wait_for_runs

DISABLE_CLIENT = "mutation($id: UUID!) { clients { disableClient(id: $id) { enabled } } }"
DISABLE_ACTION = "mutation($id: UUID!) { actions { disableAction(id: $id) { status } } }"
LIMIT = 100_000  # 1,000.00 in minor units
OVER_THE_LIMIT = f"event.record.amount > {LIMIT}"

# A client that may write triggers on tools it invokes, and read everything but transfers.
NO_TRANSFERS = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
                 "resources": ["financial.*"]},
                {"effect": "DENY", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]


@pytest.fixture
def review(api) -> str:
    return publish(api, tool("review", REVIEW))


def test_a_transfer_over_the_limit_starts_the_review_tool_once_with_its_input_in_event_data(api, review, worker):
    opening, funded = funded_account(api, 500_000)
    trigger = create_trigger(api, review, condition=OVER_THE_LIMIT)
    small = transfer(api, funded, opening, 500)
    large = transfer(api, funded, opening, 150_000)
    (run,) = wait_for_runs(api, trigger["id"], 1)
    assert run["status"] == "SUCCEEDED"
    assert run["event"]["eventType"] == "financial.Transfer.inserted"
    assert run["event"]["recordType"] == "financial.Transfer" and run["event"]["recordId"] == large["id"]
    data = run["event"]["data"]
    assert (data["id"], data["amount"], data["from_account_id"]) == (large["id"], 150_000, funded)
    assert run["invocation"]["output"] == {"eventType": "financial.Transfer.inserted", "data": data}
    assert small["id"] not in str(runs(api, trigger["id"]))


def test_a_direct_writes_run_is_at_trigger_depth_one_started_by_nobody_under_the_triggers_client(api, review):
    trigger = create_trigger(api, review)
    opening, funded = funded_account(api, 100)
    (run,) = runs(api, trigger["id"])
    assert (run["triggerDepth"], run["depth"], run["status"]) == (1, 0, "QUEUED")
    assert run["startedBy"] == {"executionId": None}
    assert trigger["clientId"] == str(api.client_id)


def test_a_rolled_back_transfer_starts_nothing(api, review, worker):
    opening, funded = funded_account(api, 500_000)
    trigger = create_trigger(api, review, condition=OVER_THE_LIMIT)
    both = """mutation($a: UUID!, $b: UUID!, $from: UUID!, $to: UUID!) { financial {
      ok: createTransfer(id: $a, input: {fromAccountId: $from, toAccountId: $to, amount: 200000}) { id }
      overdrawn: createTransfer(id: $b, input: {fromAccountId: $from, toAccountId: $to, amount: 999999999}) { id } } }"""
    error = api.error(both, {"a": str(uuid.uuid4()), "b": str(uuid.uuid4()), "from": funded, "to": opening})
    assert error["extensions"]["code"] == "insufficient_funds"
    assert runs(api, trigger["id"]) == []


def test_a_write_and_a_trigger_written_before_it_in_the_same_request_fire_together(api, review):
    opening, funded = funded_account(api, 500)
    together = """mutation($t: UUID!, $action: UUID!, $id: UUID!, $from: UUID!, $to: UUID!) {
      triggers { createTrigger(id: $t, input: {name: "same_request", event: "financial.Transfer.inserted",
                                               actionId: $action}) { id } }
      financial { createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: 5}) { id } } }"""
    trigger_id = str(uuid.uuid4())
    api.gql(together, {"t": trigger_id, "action": review, "id": str(uuid.uuid4()), "from": funded, "to": opening})
    assert len(runs(api, trigger_id)) == 1


def test_a_trigger_whose_client_may_not_select_transfers_never_fires_and_reveals_nothing(api, review, http):
    _, token = new_client(api, "no_transfers", NO_TRANSFERS)
    trigger = create_trigger(api.as_client(token), review)
    before = value(scrape(http), "ledger_triggers_skipped", "ledger_triggers_skipped_total",
                   event="financial.Transfer.inserted", reason="not_visible")
    opening, funded = funded_account(api, 150_000)
    assert runs(api, trigger["id"]) == []
    assert runs(api, actionId=review) == []  # no execution of the tool at all: nothing holds the transfer
    after = value(scrape(http), "ledger_triggers_skipped", "ledger_triggers_skipped_total",
                  event="financial.Transfer.inserted", reason="not_visible")
    assert after == before + 1


def test_a_trigger_whose_client_was_later_disabled_fails_its_run_with_action_access_denied(api, review, worker):
    client_id, token = new_client(api, "ops", ALL_ACCESS)
    trigger = create_trigger(api.as_client(token), review)
    api.gql(DISABLE_CLIENT, {"id": client_id})
    funded_account(api, 100)
    (run,) = wait_for_runs(api, trigger["id"], 1)
    assert run["status"] == "FAILED" and run["attempts"] == 1
    assert run["invocation"]["error"]["code"] == "action_access_denied"


def test_a_self_firing_cascade_stops_at_trigger_depth_8(api, http, worker):
    opening, funded = funded_account(api, 1_000)
    # Each run moves 1 more with a transfer of its own, whose id follows the one that fired it (a program has
    # no randomness; a retried attempt makes the same transfer).
    again = publish(api, tool("again", (
        'def run(event):\n'
        '    t = event["data"]\n'
        '    n = str(int(t["id"][24:].lstrip("0") or "0") + 1)\n'
        '    next_id = t["id"][:24] + "0" * (12 - len(n)) + n\n'
        '    graphql("""mutation($id: UUID!, $from: UUID!, $to: UUID!) { financial { createTransfer(id: $id,'
        ' input: {fromAccountId: $from, toAccountId: $to, amount: 1, memo: "cascade"}) { id } } }""",\n'
        '            variables={"id": next_id, "from": t["from_account_id"], "to": t["to_account_id"]})\n'
        '    return {"moved": next_id}\n')))
    trigger = create_trigger(api, again, condition='event.record.memo == "cascade"')
    before = value(scrape(http), "ledger_trigger_cascades_cut", "ledger_trigger_cascades_cut_total",
                   event="financial.Transfer.inserted", reason="depth")
    first_id = str(uuid.uuid4())[:24] + "000000000001"
    api.gql(CREATE_TRANSFER, {"id": first_id, "from": funded, "to": opening, "amount": 1, "memo": "cascade"})
    found = wait_for_runs(api, trigger["id"], 8)
    assert all(r["status"] == "SUCCEEDED" for r in found), [r["invocation"] for r in found]
    assert sorted(r["triggerDepth"] for r in found) == list(range(1, 9))
    assert all(r["status"] == "SUCCEEDED" for r in found), found
    by_depth = {r["triggerDepth"]: r for r in found}
    for depth in range(2, 9):  # each level was started by the run whose write fired it
        assert by_depth[depth]["startedBy"]["executionId"] == by_depth[depth - 1]["executionId"]
    after = value(scrape(http), "ledger_trigger_cascades_cut", "ledger_trigger_cascades_cut_total",
                  event="financial.Transfer.inserted", reason="depth")
    assert after == before + 1
    assert len(runs(api, trigger["id"])) == 8
    assert balance(api, funded) == 1_000 - 9  # the client's transfer and one for each of the 8 levels


def test_execution_updated_reacts_to_a_started_execution_that_failed(api, worker):
    doc = tool("flaky", 'def run(event):\n    fail("the ledger is closed")\n')
    doc["execution"] = {"maxAttempts": 1}
    flaky = publish(api, doc)
    alert = publish(api, tool("alert", REVIEW))
    trigger = create_trigger(api, alert, name="alert_on_failure", event="financial.ActionExecution.updated",
                             condition=f'event.record.status == "FAILED" && event.record.action_id == "{flaky}"',
                             input={"execution": {"$cel": "event.recordId"},
                                    "code": {"$cel": "event.record.error.code"},
                                    "was": {"$cel": "event.previous.status"}})
    failed = wait_for(api, start(api, flaky)["executionId"])
    assert failed["status"] == "FAILED"
    (run,) = wait_for_runs(api, trigger["id"], 1)
    assert run["event"]["data"] == {"execution": failed["executionId"], "code": "action_failure", "was": "RUNNING"}
    assert run["status"] == "SUCCEEDED" and run["triggerDepth"] == 1


def test_a_tool_cannot_create_a_trigger_through_graphql(api, review):
    maker = publish(api, tool("maker", (
        'def run(event):\n'
        '    r = graphql("""mutation($id: UUID!, $action: UUID!) { triggers { createTrigger(id: $id, input: {\n'
        '        name: "standing", event: "financial.Transfer.inserted", actionId: $action}) { id } } }""",\n'
        '        variables={"id": event["data"]["id"], "action": event["data"]["action"]}, check=False)\n'
        '    return {"codes": [e["extensions"]["code"] for e in r["errors"]]}\n')))
    done = invoke(api, maker, {"id": str(uuid.uuid4()), "action": review})
    assert done["invocation"]["output"] == {"codes": ["start_not_allowed"]}
    assert api.gql("{ triggers { triggers { id } } }")["triggers"]["triggers"] == []


def test_two_tenants_triggers_never_see_each_others_records(api, other_api):
    ours = create_trigger(api, publish(api, tool("review", REVIEW)))
    theirs = create_trigger(other_api, publish(other_api, tool("review", REVIEW)))
    funded_account(other_api, 100)
    assert runs(api, ours["id"]) == []
    (their_run,) = runs(other_api, theirs["id"])
    opening, funded = funded_account(api, 200)
    (our_run,) = runs(api, ours["id"])
    assert our_run["event"]["data"]["to_account_id"] == funded
    assert len(runs(other_api, theirs["id"])) == 1 and runs(other_api, ours["id"]) == []


def test_a_transfers_balance_changes_raise_account_updated(api, review):
    opening, funded = funded_account(api, 0)
    trigger = create_trigger(api, review, name="balances", event="financial.Account.updated",
                             input={"account": {"$cel": "event.recordId"}, "balance": {"$cel": "event.record.balance"},
                                    "before": {"$cel": "event.previous.balance"}})
    transfer(api, opening, funded, 700)
    found = runs(api, trigger["id"])
    # One transaction's runs share its createdAt: listed by id among themselves.
    assert sorted((r["event"]["data"] for r in found), key=lambda d: d["balance"]) == [
        {"account": opening, "balance": -700, "before": 0}, {"account": funded, "balance": 700, "before": 0}]
    assert all(r["event"]["recordType"] == "financial.Account" for r in found)


def test_creating_an_account_raises_account_inserted(api, review):
    trigger = create_trigger(api, review, name="new_accounts", event="financial.Account.inserted")
    account_id = create_account(api, "savings", "EUR")
    (run,) = runs(api, trigger["id"])
    assert run["event"]["data"]["id"] == account_id and run["event"]["data"]["currency"] == "EUR"


def test_an_invoked_call_raises_execution_inserted_once_with_its_final_status(api, review):
    echo = publish(api, tool("echo", 'def run(event):\n    return {}\n'))
    inserted = create_trigger(api, review, name="inserted", event="financial.ActionExecution.inserted",
                              condition=f'event.record.action_id == "{echo}"')
    updated = create_trigger(api, review, name="updated", event="financial.ActionExecution.updated",
                             condition=f'event.record.action_id == "{echo}"')
    call = invoke(api, echo, {})
    (run,) = runs(api, inserted["id"])
    assert run["event"]["recordId"] == call["executionId"]
    assert run["event"]["data"]["status"] == "SUCCEEDED"
    assert runs(api, updated["id"]) == []


def test_children_raise_no_events(api, review):
    leaf = publish(api, tool("leaf", 'def run(event):\n    return {}\n'))
    caller = publish(api, tool("caller", 'def run(event):\n    tools.leaf({})\n    return {}\n', tools=[{"name": "leaf"}]))
    trigger = create_trigger(api, review, name="every_execution", event="financial.ActionExecution.inserted",
                             condition=f'event.record.action_id != "{review}"')
    invoke(api, caller, {})
    assert [r["event"]["data"]["action_id"] for r in runs(api, trigger["id"])] == [caller]
    assert leaf not in str(runs(api, trigger["id"]))


def test_a_condition_that_cannot_be_evaluated_does_not_fire_and_is_counted(api, review, http):
    trigger = create_trigger(api, review, condition="event.record.no_such_column > 1")
    before = value(scrape(http), "ledger_triggers_skipped", "ledger_triggers_skipped_total",
                   event="financial.Transfer.inserted", reason="not_evaluable")
    funded_account(api, 100)
    assert runs(api, trigger["id"]) == []
    after = value(scrape(http), "ledger_triggers_skipped", "ledger_triggers_skipped_total",
                  event="financial.Transfer.inserted", reason="not_evaluable")
    assert after == before + 1


def test_an_input_expression_that_fails_records_a_failed_run_and_the_write_stands(api, review):
    trigger = create_trigger(api, review, input={"$cel": "event.record.no_such_column"})
    opening, funded = funded_account(api, 100)
    (run,) = runs(api, trigger["id"])
    assert run["status"] == "FAILED" and run["invocation"]["error"]["code"] == "action_input_invalid"
    assert api.gql("query($id: UUID!) { financial { account(id: $id) { balance } } }",
                   {"id": funded})["financial"]["account"]["balance"] == 100


def test_a_target_that_cannot_be_called_records_a_failed_run_and_the_write_stands(api, review):
    trigger = create_trigger(api, review)
    api.gql(DISABLE_ACTION, {"id": review})
    opening, funded = funded_account(api, 100)
    (run,) = runs(api, trigger["id"])
    assert run["status"] == "FAILED" and run["invocation"]["error"]["code"] == "action_not_callable"


def test_a_disabled_or_deleted_trigger_does_not_fire(api, review):
    disabled = create_trigger(api, review, name="disabled", enabled=False)
    deleted = create_trigger(api, review, name="deleted")
    api.gql(DELETE_TRIGGER, {"id": deleted["id"]})
    funded_account(api, 100)
    assert runs(api, disabled["id"]) == [] and runs(api, deleted["id"]) == []


def test_a_trigger_written_through_one_process_fires_on_the_next_write_through_another(api, review, settings,
                                                                                       db_url):
    from starlette.testclient import TestClient

    from ledger.api.http import build_app
    from ledger.wiring import open_services

    other = open_services(settings, db_url)
    try:
        with TestClient(build_app(other)) as elsewhere:
            there = api.__class__(elsewhere, api.token, api.tenant_id, api.client_id)
            funded_account(there, 100)  # that process now holds the tenant's (empty) set of triggers
            trigger = create_trigger(api, review)
            funded_account(there, 100)
            assert len(runs(api, trigger["id"])) == 1
    finally:
        other.close()


NESTED_DEPTH = (
    'def run(event):\n'
    '    d = event["data"]\n'
    '    r = graphql("""mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id,'
    ' input: $input) { status triggerDepth } } }""", variables={"id": d["target"], "input": {"executionId": d["eid"],'
    ' "input": {}}})\n'
    '    return r["actions"]["invokeAction"]\n')


def test_a_nested_invoke_inside_a_triggers_run_answers_the_stored_trigger_depth(api, worker):
    leaf = publish(api, tool("leaf", 'def run(event):\n    return {}\n'))
    nester = publish(api, tool("nester", NESTED_DEPTH))
    trigger = create_trigger(api, nester, name="nest", event="financial.Account.inserted",
                             input={"target": leaf, "eid": {"$cel": "event.recordId"}})
    account_id = create_account(api, "savings")
    (run,) = wait_for_runs(api, trigger["id"], 1)
    assert run["status"] == "SUCCEEDED", run["invocation"]
    assert run["invocation"]["output"] == {"status": "SUCCEEDED", "triggerDepth": 1}
    stored = api.gql("query($id: UUID!) { actions { execution(id: $id) { triggerDepth } } }", {"id": account_id})
    assert stored["actions"]["execution"] == {"triggerDepth": 1}


def test_a_queued_run_is_counted_fired_and_a_false_condition_skipped(api, review, http):
    create_trigger(api, review, condition=OVER_THE_LIMIT)

    def counts() -> tuple[float, float]:
        metrics = scrape(http)
        return (value(metrics, "ledger_triggers_fired", "ledger_triggers_fired_total",
                      event="financial.Transfer.inserted"),
                value(metrics, "ledger_triggers_skipped", "ledger_triggers_skipped_total",
                      event="financial.Transfer.inserted", reason="condition_false"))

    fired, skipped = counts()
    opening, funded = funded_account(api, 500_000)  # over the limit: fired
    transfer(api, funded, opening, 500)  # under it: skipped
    assert counts() == (fired + 1, skipped + 1)
