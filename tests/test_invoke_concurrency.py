"""invokeAction under concurrent requests: repeated executionIds and money moved both ways."""

import random
import threading
import time
import uuid

from helpers import create_account, funded_account, transfer
from invoke_helpers import INVOKE, publish, tool

TRANSFER_DOC = ('"""mutation($id: UUID!, $f: UUID!, $t: UUID!, $a: Int64!) { financial { createTransfer(id: $id,'
                ' input: {fromAccountId: $f, toAccountId: $t, amount: $a}) { id } } }"""')

# Moves `a` from f to t. The transfer's id is chosen by the target's balance, so a second run of the
# same call (after the first committed) would make a second transfer rather than collide with the first.
MOVER = (
    'def run(event):\n'
    '    d = event["data"]\n'
    '    seen = graphql("""query($id: UUID!) { financial { account(id: $id) { balance } } }""",'
    ' variables={"id": d["t"]})["financial"]["account"]["balance"]\n'
    f'    graphql({TRANSFER_DOC}, variables={{"id": d["ids"][seen % len(d["ids"])], "f": d["f"], "t": d["t"], "a": d["a"]}})\n'
    '    return seen\n'
)

TRANSFERS = """query($id: UUID!) { financial { transfers(accountId: $id, first: 500) {
  id fromAccountId toAccountId amount executionId } } }"""
BALANCE = "query($id: UUID!) { financial { account(id: $id) { balance } } }"


def invoke_until_answered(api, action_id: str, execution_id: str, data: dict, attempts: int = 20) -> tuple[dict, int]:
    """Invoke, repeating the same executionId while the answer is `retryable`; returns (execution, retries)."""
    for retries in range(attempts):
        body = api.post(INVOKE, {"id": action_id, "input": {"executionId": execution_id, "input": data}}).json()
        if body.get("errors"):
            assert body["errors"][0]["extensions"]["code"] == "retryable", body
            time.sleep(random.uniform(0, 0.01 * (retries + 1)))
            continue
        return body["data"]["actions"]["invokeAction"], retries
    raise AssertionError(f"still retryable after {attempts} attempts")


def in_threads(count: int, work) -> list:
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_two_concurrent_requests_with_one_execution_id_make_one_transfer(api):
    opening, funded = funded_account(api, 0)
    mover = publish(api, tool("mover", MOVER))
    execution_id = str(uuid.uuid4())
    data = {"f": opening, "t": funded, "a": 5, "ids": [str(uuid.uuid4()) for _ in range(5)]}
    answers = in_threads(2, lambda _: invoke_until_answered(api, mover, execution_id, data)[0])
    assert [a["executionId"] for a in answers] == [execution_id, execution_id]
    assert [a["status"] for a in answers] == ["SUCCEEDED", "SUCCEEDED"]
    assert answers[0]["invocation"] == answers[1]["invocation"]
    transfers = api.gql(TRANSFERS, {"id": funded})["financial"]["transfers"]
    assert [(t["amount"], t["executionId"]) for t in transfers] == [(5, execution_id)]
    assert api.gql(BALANCE, {"id": funded})["financial"]["account"]["balance"] == 5


def test_a_repeat_after_commit_does_not_run_again(api):
    opening, funded = funded_account(api, 0)
    mover = publish(api, tool("mover", MOVER))
    execution_id = str(uuid.uuid4())
    data = {"f": opening, "t": funded, "a": 5, "ids": [str(uuid.uuid4()) for _ in range(5)]}
    first, _ = invoke_until_answered(api, mover, execution_id, data)
    second, _ = invoke_until_answered(api, mover, execution_id, data)
    assert first["invocation"] == second["invocation"]
    assert len(api.gql(TRANSFERS, {"id": funded})["financial"]["transfers"]) == 1


def test_concurrent_transfers_both_ways_keep_balances_whole_and_non_negative(api):
    opening = create_account(api, "opening", overdraft=True)
    a = create_account(api, "a")
    b = create_account(api, "b")
    transfer(api, opening, a, 100)
    transfer(api, opening, b, 100)
    mover = publish(api, tool("mover", MOVER))

    def work(worker: int) -> list[tuple[str, dict, dict]]:
        rng = random.Random(worker)
        done = []
        for _ in range(15):
            source, target = (a, b) if rng.random() < 0.5 else (b, a)
            data = {"f": source, "t": target, "a": rng.choice([10, 30, 70]), "ids": [str(uuid.uuid4())]}
            execution_id = str(uuid.uuid4())
            execution, _ = invoke_until_answered(api, mover, execution_id, data)
            done.append((execution_id, data, execution))
        return done

    calls = [call for worker in in_threads(4, work) for call in worker]
    assert len(calls) == 60
    balances = {acct: api.gql(BALANCE, {"id": acct})["financial"]["account"]["balance"] for acct in (a, b)}
    assert all(value >= 0 for value in balances.values()), balances
    assert sum(balances.values()) == 200
    moved = {(t["id"], t["executionId"]) for acct in (a, b) for t in api.gql(TRANSFERS, {"id": acct})["financial"]["transfers"]
             if {t["fromAccountId"], t["toAccountId"]} == {a, b}}
    by_execution: dict[str, int] = {}
    for _, execution_id in moved:
        by_execution[execution_id] = by_execution.get(execution_id, 0) + 1
    expected = dict.fromkeys((a, b), 100)
    for execution_id, data, execution in calls:
        assert execution["executionId"] == execution_id
        if execution["status"] == "SUCCEEDED":
            assert by_execution.get(execution_id) == 1, execution_id
            expected[data["f"]] -= data["a"]
            expected[data["t"]] += data["a"]
        else:
            assert execution["invocation"]["error"]["code"] == "insufficient_funds", execution["invocation"]["error"]
            assert execution_id not in by_execution
    assert balances == expected
    assert any(c[2]["status"] == "SUCCEEDED" for c in calls) and any(c[2]["status"] == "FAILED" for c in calls)


def test_a_write_conflict_inside_graphql_with_check_false_is_retried_not_handed_to_the_program(api):
    opening = create_account(api, "opening", overdraft=True)
    a = create_account(api, "a")
    b = create_account(api, "b")
    transfer(api, opening, a, 1000)
    transfer(api, opening, b, 1000)
    src = ('def run(event):\n    d = event["data"]\n'
           f'    return graphql({TRANSFER_DOC}, variables={{"id": d["ids"][0], "f": d["f"], "t": d["t"], "a": d["a"]}},'
           ' check=False)["errors"]\n')
    mover = publish(api, tool("mover", src))

    def work(worker: int) -> list[tuple[dict, int]]:
        out = []
        for i in range(10):
            source, target = (a, b) if (worker + i) % 2 else (b, a)
            data = {"f": source, "t": target, "a": 1, "ids": [str(uuid.uuid4())]}
            out.append(invoke_until_answered(api, mover, str(uuid.uuid4()), data))
        return out

    answers = [answer for worker in in_threads(4, work) for answer in worker]
    assert all(execution["status"] == "SUCCEEDED" for execution, _ in answers)
    assert all(execution["invocation"]["output"] is None for execution, _ in answers)  # no errors reached a program
    balances = [api.gql(BALANCE, {"id": acct})["financial"]["account"]["balance"] for acct in (a, b)]
    assert sum(balances) == 2000
    transfers = [t for t in api.gql(TRANSFERS, {"id": a})["financial"]["transfers"] if t["fromAccountId"] != opening]
    assert len(transfers) == 40
