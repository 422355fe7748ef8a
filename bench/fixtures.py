"""What the workloads need in the ledger: a tenant and its admin token, funded accounts, and the tools
(created and published through the GraphQL API, as a client would)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ledger.auth.clients import create_tenant
from ledger.auth.tokens import TokenService, load_signing_key
from ledger.db.migrate import apply_migrations
from ledger.runtime.benchmark import READS_SOURCE

from .env import Client

TRANSFER_SRC = '''DOC = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!) { financial {
  createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount}) { id } } }"""

def run(event):
    d = event["data"]
    t = graphql(DOC, variables={"id": d["transfer_id"], "from": d["from_account"], "to": d["to_account"],
                                "amount": d["amount"]})
    return {"transfer_id": t["financial"]["createTransfer"]["id"]}
'''

# The call tree's program, shared with the sandbox's own count of it (`python -m ledger.runtime.benchmark --callgrind`).
READS_SRC = READS_SOURCE

NOOP_SRC = "def run(event):\n    return {}\n"

# The read tool called both through GraphQL invokeAction and through MCP tools/call.
BALANCE_SRC = '''DOC = """query($id: UUID!) { financial { account(id: $id) { balance } } }"""

def run(event):
    return {"balance": graphql(DOC, variables={"id": event["data"]["account_id"]})["financial"]["account"]["balance"]}
'''
MCP_SERVER = "bench"
CREATE_MCP_SERVER = """mutation($id: UUID!, $input: McpServerInput!) { mcpServers {
  createMcpServer(id: $id, input: $input) { path } } }"""

CREATE_TOOL = """mutation($id: UUID!, $input: ActionInput!) { actions {
  createAction(id: $id, input: $input) { version } publishAction(id: $id) { status } } }"""

INVOKE = ("mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input)"
          " { status invocation { error { code message } } } } }")
READ = "query($id: UUID!) { financial { account(id: $id) { balance } } }"


CREATE_TRIGGER = """mutation($id: UUID!, $input: TriggerInput!) { triggers { createTrigger(id: $id, input: $input) {
  id } } }"""
DELETE_TRIGGER = "mutation($id: UUID!) { triggers { deleteTrigger(id: $id) { id } } }"
# Events the money-moving call does not raise (it raises Transfer.inserted, Account.updated twice and
# ActionExecution.inserted): the triggers of the bench's "other types" side.
OTHER_EVENTS = ("financial.Account.inserted", "financial.PlannedAction.inserted", "financial.PlannedAction.updated")


# The queue row's trigger on execution status changes (DESIGN section 15): its condition is evaluated on
# every status change of every execution and is never true (a true one would start a run per run).
STATUS_EVENTS = ("financial.ActionExecution.updated",)
STATUS_CONDITION = 'event.record.status == "CANCELLED" && event.record.id == ""'


def add_triggers(url: str, token: str, action_id: str, count: int, events: tuple[str, ...] = OTHER_EVENTS,
                 condition: str | None = None, name: str = "bench_other") -> list[str]:
    """`count` enabled triggers, with conditions, on `events` (by default events the money-moving call does
    not raise)."""
    client = Client(url, token)
    ids = []
    try:
        for i in range(count):
            trigger_id = str(uuid.uuid4())
            client.data(CREATE_TRIGGER, {"id": trigger_id, "input": {
                "name": f"{name}_{i}", "event": events[i % len(events)], "actionId": action_id,
                "condition": condition or f'event.record.id != "" && {i} >= 0'}})
            ids.append(trigger_id)
    finally:
        client.close()
    return ids


def delete_triggers(url: str, token: str, ids: list[str]) -> None:
    client = Client(url, token)
    try:
        for trigger_id in ids:
            client.data(DELETE_TRIGGER, {"id": trigger_id})
    finally:
        client.close()


@dataclass
class Fixtures:
    database_url: str
    tenant_id: uuid.UUID
    client_id: uuid.UUID
    token: str
    jwt_secret: str
    accounts: list[str]
    transfer_tool: str
    reads_tool: str
    noop_tool: str
    balance_tool: str
    mcp_path: str  # where the bench's MCP server, listing the balance tool, is served
    euro_account: str  # an account in another currency, for the checks of the peers' transfer


def _tool(client: Client, name: str, src: str, properties: dict, policies: list[dict]) -> str:
    action_id = str(uuid.uuid4())
    client.data(CREATE_TOOL, {"id": action_id, "input": {
        "name": name, "kind": "tool", "description": f"bench: {name}",
        "config": {"runtime": "starlark", "src": src},
        "tool": {"name": name, "description": f"bench: {name}",
                 "inputSchema": {"type": "object", "properties": properties}},
        "policies": policies,
    }})
    return action_id


# The peer's transfer: what a team would write instead of the ledger, served by PostGraphile 4 as the custom
# mutation `benchTransfer`. It does the work of ledger/domain/accounts.py create_transfer: both accounts
# locked in id order in one statement, both found, the same currency, the balance checked (unless the source
# allows overdraft), the transfer inserted, both balances updated in one statement. SECURITY INVOKER (the
# default): it runs as the caller, so the tables' row-level security applies to every statement, with the
# tenant that PostGraphile sets from the bearer token (ledger_current_tenant()).
PEER_TRANSFER_FUNCTION = """
CREATE OR REPLACE FUNCTION bench_transfer(transfer_id uuid, from_id uuid, to_id uuid, amount_moved bigint)
RETURNS transfers LANGUAGE plpgsql VOLATILE SECURITY INVOKER AS $fn$
DECLARE
  tenant uuid := ledger_current_tenant();
  r accounts;
  source accounts;
  target accounts;
  created transfers;
BEGIN
  IF amount_moved IS NULL OR amount_moved <= 0 THEN
    RAISE EXCEPTION 'a transfer moves a positive amount' USING ERRCODE = '22023';
  END IF;
  IF from_id = to_id THEN
    RAISE EXCEPTION 'a transfer needs two different accounts' USING ERRCODE = '22023';
  END IF;
  FOR r IN SELECT * FROM accounts WHERE tenant_id = tenant AND id IN (from_id, to_id) ORDER BY id FOR UPDATE LOOP
    IF r.id = from_id THEN source := r; ELSE target := r; END IF;
  END LOOP;
  IF source.id IS NULL THEN
    RAISE EXCEPTION 'no account % (fromId)', from_id USING ERRCODE = 'P0002';
  END IF;
  IF target.id IS NULL THEN
    RAISE EXCEPTION 'no account % (toId)', to_id USING ERRCODE = 'P0002';
  END IF;
  IF source.currency <> target.currency THEN
    RAISE EXCEPTION 'account % holds % but account % holds %', from_id, source.currency, to_id, target.currency
      USING ERRCODE = '22023';
  END IF;
  IF source.balance - amount_moved < 0 AND NOT source.allow_overdraft THEN
    RAISE EXCEPTION 'account % holds % %, less than the % to move', from_id, source.balance, source.currency,
      amount_moved USING ERRCODE = '22023';
  END IF;
  INSERT INTO transfers (tenant_id, id, from_account_id, to_account_id, amount, currency)
    VALUES (tenant, transfer_id, from_id, to_id, amount_moved, source.currency)
    ON CONFLICT DO NOTHING RETURNING * INTO created;
  IF created.id IS NULL THEN
    RAISE EXCEPTION 'a transfer with id % already exists', transfer_id USING ERRCODE = '23505';
  END IF;
  UPDATE accounts SET balance = balance + CASE WHEN id = from_id THEN -amount_moved ELSE amount_moved END
    WHERE tenant_id = tenant AND id IN (from_id, to_id);
  RETURN created;
END
$fn$;
REVOKE ALL ON FUNCTION bench_transfer(uuid, uuid, uuid, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bench_transfer(uuid, uuid, uuid, bigint) TO ledger_app;
"""


def create_peer_transfer(database_url: str) -> None:
    """The peer's transfer function, as the owner (PostGraphile only calls it, as ledger_app's member)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(PEER_TRANSFER_FUNCTION)


def prepare_database(database_url: str) -> tuple[uuid.UUID, uuid.UUID, str, str]:
    apply_migrations(database_url)
    create_peer_transfer(database_url)
    tenant_id, client_id = create_tenant(database_url, "bench")
    key = load_signing_key(database_url)
    token, _ = TokenService(key).mint(tenant_id, client_id, None)
    return tenant_id, client_id, token, key if isinstance(key, str) else key.decode()


def populate(database_url: str, url: str, tenant_id, client_id, token: str, secret: str,
             accounts: int = 200) -> Fixtures:
    """Accounts funded from an opening-balance account, and the three bench tools, published."""
    client = Client(url, token)
    try:
        opening = str(uuid.uuid4())
        client.data("mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: \"opening\","
                    " currency: \"USD\", allowOverdraft: true}) { id } } }", {"id": opening})
        euro = str(uuid.uuid4())
        client.data("mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: \"bench EUR\","
                    " currency: \"EUR\"}) { id } } }", {"id": euro})
        ids = [str(uuid.uuid4()) for _ in range(accounts)]
        for start in range(0, accounts, 50):
            chunk = ids[start:start + 50]
            fields = []
            for i, account_id in enumerate(chunk):
                fields.append(f'a{i}: createAccount(id: "{account_id}", input: {{name: "bench {start + i}",'
                              f' currency: "USD"}}) {{ id }}')
                fields.append(f't{i}: createTransfer(id: "{uuid.uuid4()}", input: {{fromAccountId: "{opening}",'
                              f' toAccountId: "{account_id}", amount: 1000000000}}) {{ id }}')
            client.data("mutation { financial { " + " ".join(fields) + " } }")
        transfer = _tool(client, "bench_transfer", TRANSFER_SRC, {
            "transfer_id": {"type": "string"}, "from_account": {"type": "string"},
            "to_account": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}}, [
            {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.document"]},
            {"effect": "ALLOW", "actions": ["INSERT"], "resources": ["financial.Transfer.document"],
             "assertion": "context.document.amount <= 1000000"},
        ])
        reads = _tool(client, "bench_reads", READS_SRC, {
            "account_id": {"type": "string"}, "n": {"type": "integer"}}, [
            {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.document"]},
        ])
        noop = _tool(client, "bench_noop", NOOP_SRC, {}, [])
        balance = _tool(client, "bench_balance", BALANCE_SRC, {"account_id": {"type": "string"}}, [
            {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.document"]},
        ])
        # A read-only layer, as an agent's server would have: the call records its execution all the same.
        mcp_path = client.data(CREATE_MCP_SERVER, {"id": str(uuid.uuid4()), "input": {
            "name": MCP_SERVER, "tools": [{"name": "bench_balance"}],
            "policies": [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]}],
        }})["mcpServers"]["createMcpServer"]["path"]
    finally:
        client.close()
    return Fixtures(database_url, tenant_id, client_id, token, secret, ids, transfer, reads, noop, balance,
                    mcp_path, euro)
