"""Helpers for tests against a real `ledger serve` (test_cli_serve.Server): tenants, `ledger publish`, money."""

from __future__ import annotations

import itertools
import os
import subprocess
import uuid
from pathlib import Path

from test_cli_serve import ROOT, Server, _env, _ledger

from ledger.client import LedgerClient

EXAMPLES = ROOT / "examples"
# The fixed ids of the examples' actions (their .toml files).
GET_ACCOUNT_ACTIVITY = "0f5b7c2e-8a41-4c3d-9b6e-5a1d2c3e4f01"
TRANSFER = "0f5b7c2e-8a41-4c3d-9b6e-5a1d2c3e4f02"
SETTLE_INVOICE = "0f5b7c2e-8a41-4c3d-9b6e-5a1d2c3e4f03"

_tenants = itertools.count(1)


def new_tenant_token(server: Server) -> str:
    """A new tenant of the running server (`ledger tenant create`, as an operator would); its admin token."""
    name = f"t{os.getpid()}_{next(_tenants)}"
    result = subprocess.run([*_ledger(), "tenant", "create", name, "--data-dir", str(server.data_dir)],
                            capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def graphql_url(server: Server) -> str:
    return f"{server.url}/graphql"


def ledger_publish(server: Server, token: str | None, *args: str, cwd: Path = ROOT,
                   env: dict | None = None) -> subprocess.CompletedProcess:
    """`ledger publish ARGS` with LEDGER_URL and LEDGER_TOKEN set, as a CI job runs it."""
    environment = _env()
    environment["LEDGER_URL"] = graphql_url(server)
    if token is not None:
        environment["LEDGER_TOKEN"] = token
    environment.update(env or {})
    return subprocess.run([*_ledger(), "publish", *args], capture_output=True, text=True, env=environment,
                          cwd=cwd, timeout=120)


OPEN_ACCOUNTS = """mutation Open($o: UUID!, $a: UUID!, $b: UUID!, $t: UUID!, $funds: Int64!) { financial {
  opening: createAccount(id: $o, input: {name: "opening balance", currency: "USD", allowOverdraft: true}) { id }
  payer: createAccount(id: $a, input: {name: "payer", currency: "USD"}) { id }
  payee: createAccount(id: $b, input: {name: "payee", currency: "USD"}) { id }
  fund: createTransfer(id: $t, input: {fromAccountId: $o, toAccountId: $a, amount: $funds}) { id } } }"""
BALANCES = """query Balances($a: UUID!, $b: UUID!) { financial {
  payer: account(id: $a) { balance } payee: account(id: $b) { balance } } }"""


def open_accounts(client: LedgerClient, funds: int) -> tuple[str, str]:
    """A payer funded with `funds` (from an opening-balance account) and an empty payee; their ids."""
    payer, payee = str(uuid.uuid4()), str(uuid.uuid4())
    client.query(OPEN_ACCOUNTS, {"o": str(uuid.uuid4()), "a": payer, "b": payee, "t": str(uuid.uuid4()),
                                 "funds": funds})
    return payer, payee


def balances(client: LedgerClient, payer: str, payee: str) -> tuple[int, int]:
    data = client.query(BALANCES, {"a": payer, "b": payee})["financial"]
    return data["payer"]["balance"], data["payee"]["balance"]
