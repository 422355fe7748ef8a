"""The financial domain: accounts, double-entry transfers, 64-bit money, and concurrent transfers."""

from __future__ import annotations

import random
import threading
import uuid
from collections import defaultdict

import psycopg
import pytest

from helpers import ACCOUNT, CREATE_ACCOUNT, CREATE_TRANSFER, balance, create_account, funded_account, transfer

INT64_MAX = 2**63 - 1


def _transfer_error(api, source: str, target: str, amount) -> dict:
    return api.error(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": source, "to": target, "amount": amount})


def _sums_by_currency(db_url: str) -> dict[str, int]:
    with psycopg.connect(db_url) as conn:
        return {c: int(s) for c, s in conn.execute("SELECT currency, sum(balance) FROM accounts GROUP BY currency")}


# ---------------------------------------------------------------------------- accounts


def test_new_account_starts_at_zero(api):
    data = api.gql(CREATE_ACCOUNT, {"id": str(uuid.uuid4()), "name": "cash", "currency": "EUR"})
    assert data["financial"]["createAccount"]["balance"] == 0
    assert data["financial"]["createAccount"]["allowOverdraft"] is False


def test_account_id_cannot_be_reused(api):
    account_id = create_account(api)
    error = api.error(CREATE_ACCOUNT, {"id": account_id, "name": "again", "currency": "USD"})
    assert error["extensions"]["code"] == "already_exists"


@pytest.mark.parametrize("currency", ["usd", "US", "", "U$D", "TOOLONGCURRENCY"])
def test_bad_currency_code_is_invalid_input(api, currency):
    error = api.error(CREATE_ACCOUNT, {"id": str(uuid.uuid4()), "name": "x", "currency": currency})
    assert error["extensions"]["code"] == "invalid_input"


def test_blank_account_name_is_invalid_input(api):
    error = api.error(CREATE_ACCOUNT, {"id": str(uuid.uuid4()), "name": "  ", "currency": "USD"})
    assert error["extensions"]["code"] == "invalid_input"


def test_account_lists_its_transfers(api):
    opening, funded = funded_account(api, 10)
    transfer(api, funded, opening, 3)
    data = api.gql("""query($id: UUID!) { financial { account(id: $id) { transfers { amount } } } }""",
                   {"id": funded})
    assert [t["amount"] for t in data["financial"]["account"]["transfers"]] == [10, 3]


# ---------------------------------------------------------------------------- transfer rules


def test_transfer_moves_the_amount_between_the_two_accounts(api):
    opening, funded = funded_account(api, 100)
    moved = transfer(api, funded, opening, 40, memo="rent")
    assert moved["amount"] == 40 and moved["currency"] == "USD"
    assert balance(api, funded) == 60
    assert balance(api, opening) == -60


def test_transfer_returns_what_was_recorded(api):
    opening, funded = funded_account(api, 0)
    transfer_id = str(uuid.uuid4())
    api.gql(CREATE_TRANSFER, {"id": transfer_id, "from": opening, "to": funded, "amount": 7, "memo": "seed"})
    data = api.gql("""query($id: UUID!) { financial { transfer(id: $id) {
      id fromAccountId toAccountId amount currency memo executionId createdAt } } }""", {"id": transfer_id})
    recorded = data["financial"]["transfer"]
    assert recorded["fromAccountId"] == opening and recorded["toAccountId"] == funded
    assert (recorded["amount"], recorded["currency"], recorded["memo"]) == (7, "USD", "seed")
    assert recorded["createdAt"]


def test_direct_transfer_has_no_execution_id(api):
    opening, funded = funded_account(api, 0)
    assert transfer(api, opening, funded, 1)["executionId"] is None


@pytest.mark.parametrize("amount", [0, -1, -INT64_MAX - 1])
def test_non_positive_amount_is_invalid_amount(api, amount):
    opening, funded = funded_account(api, 10)
    assert _transfer_error(api, opening, funded, amount)["extensions"]["code"] == "invalid_amount"


def test_currency_mismatch(api):
    dollars = create_account(api, "dollars", "USD", overdraft=True)
    euros = create_account(api, "euros", "EUR")
    assert _transfer_error(api, dollars, euros, 1)["extensions"]["code"] == "currency_mismatch"


def test_insufficient_funds_without_overdraft(api):
    opening, funded = funded_account(api, 10)
    error = _transfer_error(api, funded, opening, 11)
    assert error["extensions"]["code"] == "insufficient_funds"
    assert error["extensions"]["hint"]
    assert balance(api, funded) == 10


def test_whole_balance_can_be_moved(api):
    opening, funded = funded_account(api, 10)
    transfer(api, funded, opening, 10)
    assert balance(api, funded) == 0


def test_overdraft_account_may_go_below_zero(api):
    opening = create_account(api, "opening", overdraft=True)
    target = create_account(api, "target")
    transfer(api, opening, target, 5)
    assert balance(api, opening) == -5


def test_transfer_to_the_same_account_is_rejected(api):
    opening = create_account(api, "opening", overdraft=True)
    assert _transfer_error(api, opening, opening, 1)["extensions"]["code"] == "invalid_input"


def test_transfer_id_cannot_be_reused(api):
    opening, funded = funded_account(api, 0)
    transfer_id = str(uuid.uuid4())
    api.gql(CREATE_TRANSFER, {"id": transfer_id, "from": opening, "to": funded, "amount": 1})
    error = api.error(CREATE_TRANSFER, {"id": transfer_id, "from": opening, "to": funded, "amount": 1})
    assert error["extensions"]["code"] == "already_exists"
    assert balance(api, funded) == 1


def test_transfer_from_a_missing_account_is_not_found(api):
    target = create_account(api)
    assert _transfer_error(api, str(uuid.uuid4()), target, 1)["extensions"]["code"] == "not_found"


def test_overlong_memo_is_invalid_input(api):
    opening, funded = funded_account(api, 0)
    error = api.error(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": opening, "to": funded, "amount": 1,
                                        "memo": "m" * 1001})
    assert error["extensions"]["code"] == "invalid_input"


# ---------------------------------------------------------------------------- 64-bit money


BIG = 2**40 + 3  # beyond 32 bits


def test_amount_beyond_32_bits_as_a_number(api):
    opening, funded = funded_account(api, 0)
    assert transfer(api, opening, funded, BIG)["amount"] == BIG
    assert balance(api, funded) == BIG


def test_amount_beyond_32_bits_as_a_decimal_string(api):
    opening, funded = funded_account(api, 0)
    assert transfer(api, opening, funded, str(BIG))["amount"] == BIG
    assert balance(api, opening) == -BIG


def test_amount_as_a_literal_beyond_32_bits(api):
    opening, funded = funded_account(api, 0)
    data = api.gql(f"""mutation {{ financial {{ createTransfer(id: "{uuid.uuid4()}", input: {{
      fromAccountId: "{opening}", toAccountId: "{funded}", amount: {BIG}}}) {{ amount }} }} }}""")
    assert data["financial"]["createTransfer"]["amount"] == BIG


def test_largest_int64_amount(api):
    opening, funded = funded_account(api, 0)
    assert transfer(api, opening, funded, str(INT64_MAX))["amount"] == INT64_MAX
    assert balance(api, funded) == INT64_MAX


def test_balance_overflowing_64_bits_is_invalid_amount(api):
    opening, funded = funded_account(api, INT64_MAX)
    assert _transfer_error(api, opening, funded, 1)["extensions"]["code"] == "invalid_amount"
    assert balance(api, funded) == INT64_MAX


@pytest.mark.parametrize("amount", [2**63, str(2**63), 2**64 + 1, str(2**70), -(2**63) - 1])
def test_amount_beyond_64_bits_is_rejected(api, amount):
    opening, funded = funded_account(api, 0)
    response = api.post(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": opening, "to": funded, "amount": amount})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"
    assert balance(api, funded) == 0


def test_amount_beyond_64_bits_as_a_literal_is_rejected(api):
    opening, funded = funded_account(api, 0)
    response = api.post(f"""mutation {{ financial {{ createTransfer(id: "{uuid.uuid4()}", input: {{
      fromAccountId: "{opening}", toAccountId: "{funded}", amount: {2**64}}}) {{ amount }} }} }}""")
    assert response.status_code == 400


@pytest.mark.parametrize("amount", ["1.5", "1e3", "", " ", "+5", "0x10", "١٢", "5 5", 1.5, True])
def test_amount_that_is_not_a_whole_decimal_is_rejected(api, amount):
    opening, funded = funded_account(api, 0)
    response = api.post(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": opening, "to": funded, "amount": amount})
    assert response.status_code == 400, response.text
    assert balance(api, funded) == 0


# ---------------------------------------------------------------------------- invariants


def test_balances_of_a_currency_sum_to_zero(api, db_url):
    usd_opening, usd = funded_account(api, 500, "USD")
    eur_opening, eur = funded_account(api, 70, "EUR")
    transfer(api, usd, usd_opening, 123)
    other = create_account(api, "other", "EUR")
    transfer(api, eur, other, 20)
    assert _sums_by_currency(db_url) == {"USD": 0, "EUR": 0}


def test_database_refuses_a_negative_balance_without_overdraft(db_url, api):
    account = create_account(api)
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE accounts SET balance = -1 WHERE id = %s", (account,))


# ---------------------------------------------------------------------------- concurrency


THREADS = 8
PER_THREAD = 25


def test_concurrent_transfers_keep_every_invariant(api, db_url):
    opening = create_account(api, "opening", overdraft=True)
    a = create_account(api, "a")
    b = create_account(api, "b")
    transfer(api, opening, a, 100)
    transfer(api, opening, b, 100)
    moves = [(a, b), (b, a), (opening, a), (opening, b), (a, opening)]
    outcomes: dict[str, int] = defaultdict(int)
    committed: list[tuple[str, str, int, str]] = []
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(PER_THREAD):
            source, target = rng.choice(moves)
            amount = rng.randint(1, 60)
            transfer_id = str(uuid.uuid4())
            response = api.post(CREATE_TRANSFER, {"id": transfer_id, "from": source, "to": target, "amount": amount})
            body = response.json()
            with lock:
                if response.status_code != 200:
                    failures.append(f"HTTP {response.status_code}: {response.text}")
                elif "errors" not in body:
                    outcomes["ok"] += 1
                    committed.append((source, target, amount, transfer_id))
                else:
                    code = body["errors"][0]["extensions"]["code"]
                    outcomes[code] += 1
                    if code not in ("insufficient_funds", "retryable"):
                        failures.append(f"unexpected error: {body['errors'][0]}")
                    if code == "retryable" and body["errors"][0]["extensions"].get("retryable") is not True:
                        failures.append(f"retryable without extensions.retryable: {body['errors'][0]}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert sum(outcomes.values()) == THREADS * PER_THREAD
    assert outcomes["ok"] > 0

    expected = {opening: -200, a: 100, b: 100}
    for source, target, amount, _ in committed:
        expected[source] -= amount
        expected[target] += amount
    with psycopg.connect(db_url) as conn:
        stored = {str(r[0]): r[1] for r in conn.execute("SELECT id, balance FROM accounts")}
        recorded = {str(r[0]) for r in conn.execute("SELECT id FROM transfers")}
    assert stored == expected
    assert stored[a] >= 0 and stored[b] >= 0
    assert sum(stored.values()) == 0
    assert {t for *_, t in committed} <= recorded
    assert len(recorded) == len(committed) + 2  # and the two opening transfers


def test_amount_as_a_float_beyond_exact_range_is_rejected_with_a_hint(api):
    opening, funded = funded_account(api, 0)
    body = (b'{"query": %s, "variables": {"id": "%s", "from": "%s", "to": "%s", "amount": 9007199254740993.0}}'
            % (__import__("json").dumps(CREATE_TRANSFER).encode(), str(uuid.uuid4()).encode(), opening.encode(),
               funded.encode()))
    response = api.http.post("/graphql", content=body, headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 400
    assert "decimal string" in response.json()["errors"][0]["message"]
    assert balance(api, funded) == 0


def test_amount_as_a_whole_float_is_accepted(api):
    opening, funded = funded_account(api, 0)
    assert transfer(api, opening, funded, 1000.0)["amount"] == 1000
