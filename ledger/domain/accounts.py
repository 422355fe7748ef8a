"""Accounts and double-entry transfers.

Money is an integer count of minor units (64-bit). Every transfer debits one account and credits
another of the same currency by the same amount, so the balances of a currency always sum to zero;
money enters through an account that allows overdraft (an opening-balance account).

Concurrency: both account rows are locked in id order (no deadlock between opposite transfers), and
the transaction runs at REPEATABLE READ, so a transfer racing another on the same account fails with a
serialization error (retried by the API) instead of losing an update.
"""

from __future__ import annotations

import re
import uuid

from ..errors import InvalidInput, LedgerError, NotFound
from ..db.prepared import PreparedRead
from ..scope import Scope
from ..db.paging import page_visible

ACCOUNT = "financial.Account.document"
ACCOUNT_INDEX = "financial.Account.indexes.all"
TRANSFER = "financial.Transfer.document"
TRANSFER_INDEX = "financial.Transfer.indexes.all"
TRANSFER_BY_ACCOUNT_INDEX = "financial.Transfer.indexes.by_account"

INT64_MAX = 2**63 - 1
_CURRENCY = re.compile(r"^[A-Z][A-Z0-9]{2,11}$")

_ACCOUNT_COLUMNS = "tenant_id, id, name, currency, balance, allow_overdraft, execution_id, created_at"
_TRANSFER_COLUMNS = ("tenant_id, id, from_account_id, to_account_id, amount, currency, memo, execution_id, "
                     "created_at")

_TRANSFER_NAMES = [c.strip() for c in _TRANSFER_COLUMNS.split(",")]
_ACCOUNT_NAMES = [c.strip() for c in _ACCOUNT_COLUMNS.split(",")]
# One row per updated account, beside the inserted transfer's columns (prefixed t_).
_TRANSFERRED_COLUMNS = ", ".join([f"u.{c}" for c in _ACCOUNT_NAMES] + [f"t.{c} AS t_{c}" for c in _TRANSFER_NAMES])
_TRANSFER_PREFIXED = tuple((c, f"t_{c}") for c in _TRANSFER_NAMES)


class InsufficientFunds(LedgerError):
    code = "insufficient_funds"


class CurrencyMismatch(LedgerError):
    code = "currency_mismatch"


class InvalidAmount(LedgerError):
    code = "invalid_amount"


class AlreadyExists(LedgerError):
    code = "already_exists"


# ---------------------------------------------------------------------------- accounts


def create_account(scope: Scope, account_id: uuid.UUID, name: str, currency: str, allow_overdraft: bool) -> dict:
    name = name.strip()
    if not name:
        raise InvalidInput("an account needs a name", hint="give the account a non-empty name")
    if len(name) > 200:
        raise InvalidInput("an account name is at most 200 characters", hint="shorten the name")
    if not _CURRENCY.match(currency):
        raise InvalidInput(
            f"{currency!r} is not a currency code",
            hint="use an upper-case code such as USD or EUR (3 to 12 letters or digits, starting with a letter)",
        )
    row = {
        "tenant_id": scope.tenant_id, "id": account_id, "name": name, "currency": currency, "balance": 0,
        "allow_overdraft": bool(allow_overdraft), "execution_id": scope.writing_execution_id, "created_at": None,
    }
    scope.require("INSERT", ACCOUNT, row)
    created = scope.one(
        f"INSERT INTO accounts (tenant_id, id, name, currency, allow_overdraft, execution_id)"
        f" VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {_ACCOUNT_COLUMNS}",
        (scope.tenant_id, account_id, name, currency, bool(allow_overdraft), scope.writing_execution_id),
    )
    if created is None:
        raise AlreadyExists(f"an account with id {account_id} already exists",
                            hint="choose a new UUID for a new account")
    scope.services.record_events.raised(scope, "financial.Account.inserted", "financial.Account", created)
    return created


# The read a call tree makes a thousand times: prepared, and run without a cursor (db/prepared.py).
_GET_ACCOUNT = PreparedRead(f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = %s AND id = %s")


def get_account(scope: Scope, account_id: uuid.UUID) -> dict | None:
    row = scope.read_one(_GET_ACCOUNT, (scope.tenant_id, account_id))
    if row is not None:
        scope.require("SELECT", ACCOUNT, row)
    return row


def list_accounts(scope: Scope, first: int, after: str | None) -> list[dict]:
    scope.require("SELECT", ACCOUNT_INDEX, index=True)
    return page_visible(scope, ACCOUNT, "accounts", _ACCOUNT_COLUMNS, first, after)


# ---------------------------------------------------------------------------- transfers

# A money call's two statements, on their prepared statements without a cursor once psycopg has prepared
# them (db/prepared.py). The lock takes both rows in id order, so that opposite transfers cannot deadlock;
# the two ids go as two parameters, not an array (psycopg's array adapter: ~40 us of CPU a statement).
_LOCK_ACCOUNTS = PreparedRead(
    f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE tenant_id = %s AND id IN (%s, %s) ORDER BY id FOR UPDATE")
# The transfer and both balances in one statement (one round trip): the balances change only when the
# transfer row was inserted, so a transfer id already taken changes nothing.
_TRANSFER = PreparedRead(
    "WITH t AS (INSERT INTO transfers (tenant_id, id, from_account_id, to_account_id, amount, currency, memo,"
    " execution_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    f" RETURNING {_TRANSFER_COLUMNS}),"
    " u AS (UPDATE accounts SET balance = balance + CASE WHEN id = %s THEN -%s::bigint ELSE %s::bigint END"
    f" WHERE tenant_id = %s AND id IN (%s, %s) AND EXISTS (SELECT 1 FROM t) RETURNING {_ACCOUNT_COLUMNS})"
    f" SELECT {_TRANSFERRED_COLUMNS} FROM t CROSS JOIN u")


def create_transfer(scope: Scope, transfer_id: uuid.UUID, from_id: uuid.UUID, to_id: uuid.UUID, amount: int,
                    memo: str | None) -> dict:
    if not isinstance(amount, int) or amount <= 0:
        raise InvalidAmount("a transfer moves a positive amount", hint="send an amount of at least 1 minor unit")
    if amount > INT64_MAX:
        raise InvalidAmount("the amount does not fit in 64 bits", hint=f"send at most {INT64_MAX}")
    if from_id == to_id:
        raise InvalidInput("a transfer needs two different accounts", hint="choose another destination account")
    if memo is not None and len(memo) > 1000:
        raise InvalidInput("a memo is at most 1,000 characters", hint="shorten the memo")
    tenant_id = scope.tenant_id
    source = target = None
    # The locked rows told apart by comparing ids (UUID's == and hash are Python code: no dict of them).
    for row in scope.read_all(_LOCK_ACCOUNTS, (tenant_id, from_id, to_id)):
        if row["id"] == from_id:
            source = row
        else:
            target = row
    if source is None:
        raise NotFound(f"no account {from_id} (fromAccountId)", hint="create the account first, or check the id")
    if target is None:
        raise NotFound(f"no account {to_id} (toAccountId)", hint="create the account first, or check the id")
    scope.require("SELECT", ACCOUNT, source)
    scope.require("SELECT", ACCOUNT, target)
    if source["currency"] != target["currency"]:
        raise CurrencyMismatch(
            f"account {from_id} holds {source['currency']} but account {to_id} holds {target['currency']}",
            hint="transfer between accounts of the same currency",
        )
    currency = source["currency"]
    execution_id = scope.writing_execution_id
    record = {
        "tenant_id": tenant_id, "id": transfer_id, "from_account_id": from_id, "to_account_id": to_id,
        "amount": amount, "currency": currency, "memo": memo, "execution_id": execution_id, "created_at": None,
    }
    scope.require("INSERT", TRANSFER, record)
    new_source_balance = source["balance"] - amount
    if new_source_balance < 0 and not source["allow_overdraft"]:
        raise InsufficientFunds(
            f"account {from_id} holds {source['balance']} {source['currency']}, less than the {amount} to move",
            hint="move a smaller amount, or fund the account first",
        )
    if new_source_balance < -INT64_MAX - 1 or target["balance"] + amount > INT64_MAX:
        raise InvalidAmount("the transfer would overflow a 64-bit balance", hint="move a smaller amount")
    rows = scope.read_all(
        _TRANSFER,
        (tenant_id, transfer_id, from_id, to_id, amount, currency, memo, execution_id,
         from_id, amount, amount, tenant_id, from_id, to_id),
    )
    if not rows:
        raise AlreadyExists(f"a transfer with id {transfer_id} already exists",
                            hint="choose a new UUID for a new transfer")
    first = rows[0]
    created = {column: first[prefixed] for column, prefixed in _TRANSFER_PREFIXED}
    debited, credited = rows if first["id"] == from_id else reversed(rows)
    # The transfer, then its two balance changes (debited account first): each a record event.
    events = scope.services.record_events
    events.raised(scope, "financial.Transfer.inserted", "financial.Transfer", created)
    events.raised(scope, "financial.Account.updated", "financial.Account",
                  {column: debited[column] for column in _ACCOUNT_NAMES}, source)
    events.raised(scope, "financial.Account.updated", "financial.Account",
                  {column: credited[column] for column in _ACCOUNT_NAMES}, target)
    return created


def get_transfer(scope: Scope, transfer_id: uuid.UUID) -> dict | None:
    row = scope.one(f"SELECT {_TRANSFER_COLUMNS} FROM transfers WHERE tenant_id = %s AND id = %s",
                    (scope.tenant_id, transfer_id))
    if row is not None:
        scope.require("SELECT", TRANSFER, row)
    return row


def list_transfers(scope: Scope, account_id: uuid.UUID | None, first: int, after: str | None) -> list[dict]:
    if account_id is None:
        scope.require("SELECT", TRANSFER_INDEX, index=True)
        return page_visible(scope, TRANSFER, "transfers", _TRANSFER_COLUMNS, first, after)
    scope.require("SELECT", TRANSFER_BY_ACCOUNT_INDEX, index=True)
    return page_visible(scope, TRANSFER, "transfers", _TRANSFER_COLUMNS, first, after,
                        where="(from_account_id = %s OR to_account_id = %s)", params=(account_id, account_id))
