"""A transfer's locked rows and its record events, over a scope that answers the two statements itself:
which row is the source, which the target, in whichever order the lock returns them. No database."""

from __future__ import annotations

import uuid

import pytest

from ledger.domain import accounts
from ledger.errors import NotFound

TENANT = uuid.uuid4()


def account(account_id: uuid.UUID, balance: int) -> dict:
    return {"tenant_id": TENANT, "id": account_id, "name": f"a{balance}", "currency": "USD", "balance": balance,
            "allow_overdraft": False, "execution_id": None, "created_at": None}


class _Events:
    def __init__(self) -> None:
        self.raised_events: list[tuple] = []

    def raised(self, scope, event_type, record_type, record, previous=None) -> None:
        self.raised_events.append((event_type, record, previous))


class _Scope:
    """What create_transfer asks of a scope: the lock's rows, the transfer's rows, every check allowed."""

    def __init__(self, locked: list[dict]) -> None:
        self.tenant_id = TENANT
        self.writing_execution_id = None
        self.locked = locked
        self.required: list[tuple] = []
        self.services = type("Services", (), {"record_events": _Events()})()

    def require(self, operation, resource, document=None, *, index=False) -> None:
        self.required.append((operation, resource, document))

    def read_all(self, statement, params):
        if statement is accounts._LOCK_ACCOUNTS:
            return list(self.locked)
        assert statement is accounts._TRANSFER
        _tenant, transfer_id, from_id, to_id, amount, currency, memo, execution_id = params[:8]
        transfer = {"tenant_id": TENANT, "id": transfer_id, "from_account_id": from_id, "to_account_id": to_id,
                    "amount": amount, "currency": currency, "memo": memo, "execution_id": execution_id,
                    "created_at": None}
        rows = []
        for row in sorted(self.locked, key=lambda r: r["id"]):  # the UPDATE's order: any
            change = -amount if row["id"] == from_id else amount
            rows.append({**row, "balance": row["balance"] + change,
                         **{f"t_{column}": value for column, value in transfer.items()}})
        return rows


@pytest.mark.parametrize("source_first", [True, False])
def test_a_transfer_raises_its_insert_then_the_debited_then_the_credited_account(source_first):
    low, high = sorted([uuid.uuid4(), uuid.uuid4()])
    from_id, to_id = (low, high) if source_first else (high, low)
    source, target = account(from_id, 500), account(to_id, 20)
    scope = _Scope(sorted([source, target], key=lambda r: r["id"]))
    transfer_id = uuid.uuid4()
    created = accounts.create_transfer(scope, transfer_id, from_id, to_id, 300, "rent")
    assert created == {"tenant_id": TENANT, "id": transfer_id, "from_account_id": from_id, "to_account_id": to_id,
                       "amount": 300, "currency": "USD", "memo": "rent", "execution_id": None, "created_at": None}
    assert [(op, resource, document) for op, resource, document in scope.required] == [
        ("SELECT", accounts.ACCOUNT, source), ("SELECT", accounts.ACCOUNT, target),
        ("INSERT", accounts.TRANSFER, {**created})]
    assert scope.services.record_events.raised_events == [
        ("financial.Transfer.inserted", created, None),
        ("financial.Account.updated", {**source, "balance": 200}, source),
        ("financial.Account.updated", {**target, "balance": 320}, target),
    ]


@pytest.mark.parametrize(("present", "label"), [("to", "fromAccountId"), ("from", "toAccountId"), (None, "fromAccountId")])
def test_a_transfer_names_the_account_that_is_missing(present, label):
    from_id, to_id = uuid.uuid4(), uuid.uuid4()
    locked = {"to": [account(to_id, 0)], "from": [account(from_id, 0)], None: []}[present]
    with pytest.raises(NotFound) as raised:
        accounts.create_transfer(_Scope(locked), uuid.uuid4(), from_id, to_id, 1, None)
    missing = from_id if label == "fromAccountId" else to_id
    assert raised.value.message == f"no account {missing} ({label})"
