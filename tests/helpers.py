"""Small builders the tests share."""

from __future__ import annotations

import uuid

CREATE_ACCOUNT = """mutation($id: UUID!, $name: String!, $currency: String!, $overdraft: Boolean) {
  financial { createAccount(id: $id, input: {name: $name, currency: $currency, allowOverdraft: $overdraft}) {
    id name currency balance allowOverdraft } } }"""

CREATE_TRANSFER = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!, $memo: String) {
  financial { createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount, memo: $memo}) {
    id amount currency executionId } } }"""

ACCOUNT = """query($id: UUID!) { financial { account(id: $id) { id name balance currency } } }"""


def create_account(api, name: str = "cash", currency: str = "USD", overdraft: bool = False) -> str:
    account_id = str(uuid.uuid4())
    api.gql(CREATE_ACCOUNT, {"id": account_id, "name": name, "currency": currency, "overdraft": overdraft})
    return account_id


def transfer(api, source: str, target: str, amount: int, memo: str | None = None) -> dict:
    return api.gql(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": source, "to": target, "amount": amount,
                                     "memo": memo})["financial"]["createTransfer"]


def balance(api, account_id: str) -> int:
    return api.gql(ACCOUNT, {"id": account_id})["financial"]["account"]["balance"]


def funded_account(api, amount: int, currency: str = "USD") -> tuple[str, str]:
    """An opening-balance account and a second account funded from it; returns (opening, funded)."""
    opening = create_account(api, "opening", currency, overdraft=True)
    funded = create_account(api, "funded", currency)
    if amount:
        transfer(api, opening, funded, amount)
    return opening, funded


def json_read_outcome(read, text) -> tuple[str, object]:
    """What a JSON reader makes of `text`, comparable across readers: its value exactly (a float's type and
    digits, an int's exactness, by repr) or its error's class and message."""
    try:
        value = read(text)
    except (ValueError, RecursionError) as exc:
        return "error", (type(exc).__name__, str(exc))
    return "value", (repr(value), value == value)
