"""The CI path: `ledger publish` of TOML definitions against a real `ledger serve`, then the published
example tool set (`examples/`) invoked with ledger.client.

One server for the module; every test publishes into a tenant of its own (the examples' action ids
are fixed, and ids are per tenant).
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from live_helpers import (EXAMPLES, GET_ACCOUNT_ACTIVITY, SETTLE_INVOICE, TRANSFER, balances, graphql_url,
                          ledger_publish, new_tenant_token, open_accounts)
from test_cli_serve import Server, workdir  # noqa: F401 - the module-scoped work dir fixture

from ledger.client import LedgerClient

IDS = {"get_account_activity": GET_ACCOUNT_ACTIVITY, "transfer": TRANSFER, "settle_invoice": SETTLE_INVOICE}
STATE = """query($a: UUID!, $b: UUID!, $c: UUID!) { actions {
  a: action(id: $a) { name status latestVersion }
  b: action(id: $b) { name status latestVersion }
  c: action(id: $c) { name status latestVersion } } }"""


@pytest.fixture(scope="module")
def server(workdir):  # noqa: F811
    served = Server(workdir / "data")
    yield served
    served.stop()


@pytest.fixture
def token(server):
    return new_tenant_token(server)


@pytest.fixture
def client(server, token):
    return LedgerClient(graphql_url(server), token)


@pytest.fixture
def examples(tmp_path):
    """A copy of examples/ that a test may change."""
    return shutil.copytree(EXAMPLES, tmp_path / "examples")


def state(client: LedgerClient) -> dict:
    """name -> (status, latestVersion) of the three example actions that exist."""
    data = client.query(STATE, {"a": GET_ACCOUNT_ACTIVITY, "b": TRANSFER, "c": SETTLE_INVOICE})["actions"]
    return {a["name"]: (a["status"], a["latestVersion"]) for a in data.values() if a is not None}


def lines(result) -> list[str]:
    return result.stdout.strip().splitlines()


# ---------------------------------------------------------------------------- publishing


def test_publish_creates_and_publishes_the_examples_referenced_tools_first(server, token, client, examples):
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[:3] in (
        ["get_account_activity: created v1, published", "transfer: created v1, published",
         "settle_invoice: created v1, published"],
        ["transfer: created v1, published", "get_account_activity: created v1, published",
         "settle_invoice: created v1, published"])
    assert out[-1] == "3 action(s): 3 created, 0 updated, 0 unchanged"
    assert state(client) == {name: ("ACTIVE", 1) for name in IDS}


def test_republishing_unchanged_definitions_writes_no_version(server, token, client, examples):
    assert ledger_publish(server, token, str(examples)).returncode == 0
    again = ledger_publish(server, token, str(examples))
    assert again.returncode == 0, again.stderr
    assert sorted(lines(again)[:3]) == ["get_account_activity: unchanged (v1)", "settle_invoice: unchanged (v1)",
                                        "transfer: unchanged (v1)"]
    assert state(client) == {name: ("ACTIVE", 1) for name in IDS}


def test_changing_one_program_writes_exactly_one_new_version(server, token, client, examples):
    assert ledger_publish(server, token, str(examples)).returncode == 0
    star = examples / "transfer.star"
    star.write_text(star.read_text() + "\n# moved to the payments team\n")
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 0, result.stderr
    assert "transfer: v1 -> v2" in lines(result)
    assert "settle_invoice: unchanged (v1)" in lines(result)
    assert lines(result)[-1] == "3 action(s): 0 created, 1 updated, 2 unchanged"
    assert state(client) == {"get_account_activity": ("ACTIVE", 1), "transfer": ("ACTIVE", 2),
                             "settle_invoice": ("ACTIVE", 1)}


def test_files_and_directories_may_be_mixed_and_each_file_counts_once(server, token, client, examples):
    result = ledger_publish(server, token, str(examples / "transfer.toml"), str(examples),
                            str(examples / "transfer.toml"))
    assert result.returncode == 0, result.stderr
    assert lines(result)[-1] == "3 action(s): 3 created, 0 updated, 0 unchanged"


def test_an_existing_unpublished_action_gets_a_new_version_and_is_published(server, token, client, examples):
    # A draft written by hand under the id of examples/transfer.toml, never published.
    client.query("""mutation($id: UUID!) { actions { createAction(id: $id, input: {
        name: "transfer", kind: "tool", config: {runtime: "starlark", src: "def run(event):\\n    return 1\\n"},
        tool: {name: "transfer", description: "a draft", inputSchema: {type: "object"}}}) { version } } }""",
                 {"id": TRANSFER})
    assert state(client) == {"transfer": ("UNPUBLISHED", 1)}
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 0, result.stderr
    assert "transfer: v1 -> v2, published" in lines(result)
    assert "get_account_activity: created v1, published" in lines(result)
    assert state(client)["transfer"] == ("ACTIVE", 2)


# ---------------------------------------------------------------------------- failures


def test_a_broken_program_fails_naming_the_star_file_and_line_and_writes_nothing(server, token, client, examples):
    star = examples / "settle_invoice.star"
    source = star.read_text().splitlines()
    source.append("def broken(:")
    star.write_text("\n".join(source) + "\n")
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 1
    assert f"{star}:{len(source)}:" in result.stderr, result.stderr
    assert "action_definition_invalid" in result.stderr
    assert "nothing was written" in result.stderr
    # All or nothing: the two tools before it in the request were not created either.
    assert state(client) == {}


def test_an_undeclared_tool_names_the_star_file_and_line(server, token, examples):
    star = examples / "settle_invoice.star"
    star.write_text(star.read_text().replace("tools.transfer(", "tools.transfers("))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 1
    line = next(i for i, text in enumerate(star.read_text().splitlines(), 1) if "tools.transfers(" in text)
    assert f"{star}:{line}:" in result.stderr and "tools.transfers" in result.stderr, result.stderr


def test_a_bad_input_schema_names_the_toml_file_and_the_path_in_it(server, token, client, examples):
    toml = examples / "transfer.toml"
    toml.write_text(toml.read_text().replace("properties.memo =", 'properties.class = { type = "string" }\n'
                                                                   "properties.memo ="))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 1
    assert f"{toml}: tool.inputSchema.properties.class: 'class' is a Python keyword" in result.stderr, result.stderr
    # The server stops at the first failing action; the ones after it were not checked, and it says so.
    assert f"not checked (the request stopped at the first failure): {examples / 'settle_invoice.toml'}" \
        in result.stderr
    assert state(client) == {}


def test_a_value_of_the_wrong_type_names_the_file_and_key(server, token, examples):
    toml = examples / "get_account_activity.toml"
    toml.write_text(toml.read_text().replace("responseTimeout = 10000", 'responseTimeout = "10 s"'))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 1
    assert f"{toml}: tool.responseTimeout: Int cannot represent" in result.stderr, result.stderr


def test_invalid_toml_is_a_file_error_and_nothing_is_sent(server, token, client, examples):
    toml = examples / "transfer.toml"
    toml.write_text(toml.read_text() + "\nmemo = [\n")
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 2
    assert f"{toml}: not valid TOML" in result.stderr, result.stderr
    assert state(client) == {}


def test_unknown_keys_and_a_missing_program_are_file_errors(server, token, examples):
    toml = examples / "transfer.toml"
    toml.write_text(toml.read_text().replace('src = "transfer.star"', 'src = "missing.star"\nversion = 3'))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 2
    assert f"{toml}: version: unknown key" in result.stderr, result.stderr
    assert f"{toml}: src: {examples / 'missing.star'} does not exist" in result.stderr, result.stderr


def test_a_reference_cycle_among_the_files_is_a_clear_error(server, token, examples):
    toml = examples / "transfer.toml"
    toml.write_text(toml.read_text() + '\n[[tools]]\nname = "settle_invoice"\n')
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 2
    assert "cycle: settle_invoice" in result.stderr or "cycle: transfer" in result.stderr, result.stderr
    assert str(toml) in result.stderr


def test_without_a_token_it_is_a_usage_error_and_with_a_bad_one_the_server_refuses(server, examples):
    missing = ledger_publish(server, None, str(examples))
    assert missing.returncode == 2 and "LEDGER_TOKEN" in missing.stderr
    forged = ledger_publish(server, "not-a-token", str(examples))
    assert forged.returncode == 1 and "unauthenticated" in forged.stderr


def test_url_and_token_options_override_the_environment(server, token, client, examples):
    result = ledger_publish(server, "not-a-token", "--url", graphql_url(server), "--token", token, str(examples),
                            env={"LEDGER_URL": "http://127.0.0.1:1/graphql"})
    assert result.returncode == 0, result.stderr
    assert len(state(client)) == 3


# ---------------------------------------------------------------------------- dry run


def test_dry_run_reports_what_would_change_and_writes_nothing(server, token, client, examples):
    result = ledger_publish(server, token, "--dry-run", str(examples))
    assert result.returncode == 0, result.stderr
    assert "nothing was written" in result.stdout
    assert "settle_invoice: created v1, published" in lines(result)
    assert state(client) == {}
    assert ledger_publish(server, token, str(examples)).returncode == 0
    star = examples / "get_account_activity.star"
    star.write_text(star.read_text().replace("MAX_PAGES = 20", "MAX_PAGES = 10"))
    changed = ledger_publish(server, token, "--dry-run", str(examples))
    assert changed.returncode == 0, changed.stderr
    assert "get_account_activity: v1 -> v2" in lines(changed)
    assert state(client)["get_account_activity"] == ("ACTIVE", 1)


def test_dry_run_reports_the_servers_problems(server, token, examples):
    star = examples / "transfer.star"
    star.write_text(star.read_text().replace("createTransfer(", "createTransfers("))
    result = ledger_publish(server, token, "--dry-run", str(examples))
    assert result.returncode == 1
    assert f"{star}:" in result.stderr and "createTransfers" in result.stderr, result.stderr


# ---------------------------------------------------------------------------- the example tool set, invoked


def test_settle_invoice_moves_the_money_through_both_tools(server, token, client):
    assert ledger_publish(server, token, str(EXAMPLES)).returncode == 0
    payer, payee = open_accounts(client, 10_000)
    invoice = str(uuid.uuid4())
    execution = client.invoke(SETTLE_INVOICE, {"invoice_id": invoice, "payer_account": payer,
                                               "payee_account": payee, "amount": 2_500})
    assert execution.status == "SUCCEEDED", execution.error
    assert execution.output == {"invoice_id": invoice, "transfer_id": invoice, "paid": 2_500, "currency": "USD",
                                "payer_balance": 7_500}
    assert balances(client, payer, payee) == (7_500, 2_500)
    called = [child.action_id for child in execution.children]
    assert called.index(GET_ACCOUNT_ACTIVITY) < called.index(TRANSFER)
    # The transfer records the execution of the tool that made it.
    transfer = client.query("query($id: UUID!) { financial { transfer(id: $id) { memo executionId } } }",
                            {"id": invoice})["financial"]["transfer"]
    made_by = next(child for child in execution.children if child.action_id == TRANSFER)
    assert transfer == {"memo": f"invoice {invoice}", "executionId": made_by.execution_id}

    again = client.invoke(SETTLE_INVOICE, {"invoice_id": invoice, "payer_account": payer,
                                           "payee_account": payee, "amount": 2_500})
    assert again.status == "FAILED" and "already settled" in again.error.message
    assert balances(client, payer, payee) == (7_500, 2_500)


def test_settle_invoice_with_short_funds_fails_with_the_top_up_hint(server, token, client):
    assert ledger_publish(server, token, str(EXAMPLES)).returncode == 0
    payer, payee = open_accounts(client, 1_000)
    invoice = str(uuid.uuid4())
    execution = client.invoke(SETTLE_INVOICE, {"invoice_id": invoice, "payer_account": payer,
                                               "payee_account": payee, "amount": 1_750})
    assert execution.status == "FAILED"
    assert execution.error.code == "action_failure"
    assert execution.error.message.startswith(f"insufficient funds to settle invoice {invoice}")
    assert execution.error.hint.startswith(f"top up account {payer} by 750")
    assert balances(client, payer, payee) == (1_000, 0)
    # Recorded: reading it back gives the same failure.
    assert client.execution(execution.execution_id).error == execution.error


def test_get_account_activity_returns_the_latest_transfers(server, token, client):
    assert ledger_publish(server, token, str(EXAMPLES)).returncode == 0
    payer, payee = open_accounts(client, 10_000)
    for amount in (1, 2, 3):
        assert client.invoke(TRANSFER, {"transfer_id": str(uuid.uuid4()), "from_account": payer,
                                        "to_account": payee, "amount": amount}).succeeded
    activity = client.invoke(GET_ACCOUNT_ACTIVITY, {"account_id": payer, "limit": 2}).check().output
    assert activity["balance"] == 10_000 - 6 and activity["currency"] == "USD"
    assert [t["amount"] for t in activity["transfers"]] == [2, 3]


# ---------------------------------------------------------------------------- MCP servers

ASSISTANT = "0f5b7c2e-8a41-4c3d-9b6e-5a1d2c3e4f10"
SERVER = """query($id: UUID!) { mcpServers { mcpServer(id: $id) { name path enabled
  tools { name actionId actionVersion input confirm } policies { effect actions resources assertion } } } }"""
READ_ONLY_CLIENT = """mutation($id: UUID!) { clients {
  createClient(id: $id, input: {name: "ci reader", policies: [{effect: ALLOW, actions: [SELECT],
    resources: ["financial.*"]}]}) { id }
  issueToken(clientId: $id) { token } } }"""


def read_server(client: LedgerClient):
    return client.query(SERVER, {"id": ASSISTANT})["mcpServers"]["mcpServer"]


def test_publish_creates_the_example_mcp_server_after_the_tools_it_lists(server, token, client, examples):
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[3:5] == ["MCP server assistant: created (/mcp/assistant)",
                        "1 MCP server(s): 1 created, 0 updated, 0 unchanged"]
    listed = read_server(client)
    assert listed["path"] == "/mcp/assistant" and listed["enabled"] is True
    assert [(t["name"], t["actionId"]) for t in listed["tools"]] == [
        ("get_account_activity", GET_ACCOUNT_ACTIVITY), ("transfer", TRANSFER), ("settle_invoice", SETTLE_INVOICE),
        ("program", "00000000-0000-4000-8000-000000000003")]
    assert listed["tools"][0]["input"] == {"limit": 20}


def test_republishing_an_unchanged_server_writes_nothing_so_a_reader_may_do_it(server, token, client, examples):
    assert ledger_publish(server, token, str(examples)).returncode == 0
    before = read_server(client)
    # Every update in the request equals the record: it needs SELECT only, and writes nothing.
    reader = client.query(READ_ONLY_CLIENT, {"id": str(uuid.uuid4())})["clients"]["issueToken"]["token"]
    again = ledger_publish(server, reader, str(examples))
    assert again.returncode == 0, again.stderr
    assert "MCP server assistant: unchanged (/mcp/assistant)" in lines(again)
    assert lines(again)[-2] == "1 MCP server(s): 0 created, 0 updated, 1 unchanged"
    assert read_server(client) == before


def test_a_changed_server_definition_updates_the_record(server, token, client, examples):
    assert ledger_publish(server, token, str(examples)).returncode == 0
    toml = examples / "assistant.toml"
    # confirm (DESIGN 14) on the transfer tool, the second reference
    toml.write_text(toml.read_text().replace('name = "transfer"', 'name = "transfer"\nconfirm = true')
                    .replace("enabled = true", "enabled = false"))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 0, result.stderr
    assert "MCP server assistant: updated (/mcp/assistant, disabled)" in lines(result)
    updated = read_server(client)
    assert updated["enabled"] is False and updated["tools"][1]["confirm"] is True


def test_a_bad_server_definition_names_its_file_and_the_path_in_it_and_writes_nothing(server, token, client,
                                                                                      examples):
    toml = examples / "assistant.toml"
    toml.write_text(toml.read_text().replace('name = "settle_invoice"', 'name = "settle_invoices"')
                    .replace('resources = ["financial.*"]', 'resources = ["financial..*"]'))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 1
    assert "mcp_server_definition_invalid" in result.stderr, result.stderr
    assert f"{toml}: tools[2].name: no action named 'settle_invoices'" in result.stderr, result.stderr
    assert f"{toml}: policies[0].resources[0]:" in result.stderr, result.stderr
    assert state(client) == {} and read_server(client) is None


def test_a_dry_run_reports_the_server_it_would_create_and_writes_nothing(server, token, client, examples):
    result = ledger_publish(server, token, "--dry-run", str(examples))
    assert result.returncode == 0, result.stderr
    assert "MCP server assistant: created (/mcp/assistant)" in lines(result)
    assert lines(result)[-2] == "1 MCP server(s): 1 created, 0 updated, 0 unchanged (dry run)"
    assert read_server(client) is None


def test_an_unknown_key_of_a_server_file_is_a_file_error(server, token, examples):
    toml = examples / "assistant.toml"
    toml.write_text(toml.read_text().replace("enabled = true", "enabled = true\nsrc = \"assistant.star\""))
    result = ledger_publish(server, token, str(examples))
    assert result.returncode == 2
    assert f"{toml}: src: unknown key; an MCP server definition has" in result.stderr, result.stderr
