"""MCP server records (DESIGN 12): written, read, listed and deleted through GraphQL, under policy."""

from __future__ import annotations

import datetime
import uuid

import pytest

from invoke_helpers import INVOKE, invoke, publish, tool
from registry_helpers import create, create_error, lifecycle, problems
from test_policies import allow, as_client, deny

from ledger.actions.mcp_servers import McpServer, server_layer
from ledger.actions.natives import NATIVE_TOOLS
from ledger.errors import PermissionDenied

SERVER_FIELDS = """id name description instructions enabled path createdAt
  tools { name actionId actionVersion input confirm action { name version } }
  policies { effect actions resources assertion }"""
CREATE_SERVER = f"""mutation($id: UUID!, $input: McpServerInput!) {{ mcpServers {{
  createMcpServer(id: $id, input: $input) {{ {SERVER_FIELDS} }} }} }}"""
UPDATE_SERVER = f"""mutation($id: UUID!, $input: McpServerInput!) {{ mcpServers {{
  updateMcpServer(id: $id, input: $input) {{ {SERVER_FIELDS} }} }} }}"""
DELETE_SERVER = f"""mutation($id: UUID!) {{ mcpServers {{ deleteMcpServer(id: $id) {{ {SERVER_FIELDS} }} }} }}"""
READ_SERVER = f"""query($id: UUID!) {{ mcpServers {{ mcpServer(id: $id) {{ {SERVER_FIELDS} }} }} }}"""
LIST_SERVERS = """query($first: Int, $after: String) { mcpServers { mcpServers(first: $first, after: $after) {
  id name } } }"""
ISSUE_TOKEN = """mutation($client: UUID!, $server: UUID) { clients {
  issueToken(clientId: $client, mcpServer: $server) { token expiresAt } } }"""
START = """mutation($id: UUID!, $input: StartActionInput!) { actions { startAction(id: $id, input: $input) {
  executionId status } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { executionId mcpServerId } } }"""

READ_ONLY = [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]}]
SERVER_NATIVE_NAMES = ("program", "invoke", "get_task", "cancel_task")


def echo_tool(api, name: str = "echo") -> str:
    return publish(api, tool(name, 'def run(event):\n    return event["data"]\n'))


def server_input(name: str = "assistant", tools: list | None = None, **extra) -> dict:
    doc = {"name": name, "description": "an assistant's tools", "instructions": "Read before you write.",
           "tools": [{"name": "echo"}] if tools is None else tools, "policies": READ_ONLY}
    doc.update(extra)
    return doc


def create_server(api, doc: dict, server_id: str | None = None) -> dict:
    server_id = server_id or str(uuid.uuid4())
    return api.gql(CREATE_SERVER, {"id": server_id, "input": doc})["mcpServers"]["createMcpServer"]


def server_problems(error: dict) -> dict[str, str]:
    assert error["extensions"]["code"] == "mcp_server_definition_invalid", error
    return {p["path"]: p["message"] for p in error["extensions"]["problems"]}


# ---------------------------------------------------------------------------- the record


def test_a_created_server_is_read_back_with_its_path_and_resolved_references(api):
    echo_id = echo_tool(api)
    server_id = str(uuid.uuid4())
    created = create_server(api, server_input(tools=[{"name": "echo", "version": 1, "input": {"text": "hi"}}]),
                            server_id)
    read = api.gql(READ_SERVER, {"id": server_id})["mcpServers"]["mcpServer"]
    assert read == created
    assert read["path"] == "/mcp/assistant" and read["enabled"] is True
    assert read["instructions"] == "Read before you write."
    assert read["tools"] == [{"name": "echo", "actionId": echo_id, "actionVersion": 1, "input": {"text": "hi"},
                              "confirm": False, "action": {"name": "echo", "version": 1}}]
    assert read["policies"] == [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"],
                                 "assertion": None}]


def test_servers_are_listed_in_creation_order_and_paged_by_cursor(api):
    echo_tool(api)
    names = ["first", "second", "third"]
    ids = [create_server(api, server_input(name))["id"] for name in names]
    page = api.gql(LIST_SERVERS, {"first": 2})["mcpServers"]["mcpServers"]
    assert [s["name"] for s in page] == ["first", "second"]
    rest = api.gql(LIST_SERVERS, {"first": 2, "after": page[-1]["id"]})["mcpServers"]["mcpServers"]
    assert [s["id"] for s in rest] == ids[2:]


def test_an_update_replaces_the_whole_definition(api):
    echo_tool(api)
    echo_tool(api, "shout")
    server_id = create_server(api, server_input())["id"]
    changed = api.gql(UPDATE_SERVER, {"id": server_id, "input": {
        "name": "helper", "tools": [{"name": "shout"}, {"name": "echo"}], "enabled": False}})
    server = changed["mcpServers"]["updateMcpServer"]
    assert server["name"] == "helper" and server["path"] == "/mcp/helper" and server["enabled"] is False
    assert [t["name"] for t in server["tools"]] == ["shout", "echo"]
    assert server["description"] is None and server["policies"] == []


def test_an_update_equal_to_the_record_writes_nothing_and_needs_only_select(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    reader = as_client(api, [allow(["SELECT"], ["financial.*"])])
    same = reader.gql(UPDATE_SERVER, {"id": server_id, "input": server_input()})["mcpServers"]["updateMcpServer"]
    assert same["name"] == "assistant"
    error = reader.error(UPDATE_SERVER, {"id": server_id, "input": server_input(description="changed")})
    assert error["extensions"]["code"] == "permission_denied"
    assert "UPDATE on financial.McpServer.document" in error["extensions"]["hint"]


def test_a_deleted_server_reads_as_null_leaves_the_listing_and_frees_its_name(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    deleted = api.gql(DELETE_SERVER, {"id": server_id})["mcpServers"]["deleteMcpServer"]
    assert deleted["id"] == server_id
    assert api.gql(READ_SERVER, {"id": server_id})["mcpServers"]["mcpServer"] is None
    assert api.gql(LIST_SERVERS)["mcpServers"]["mcpServers"] == []
    assert create_server(api, server_input())["name"] == "assistant"
    error = api.error(UPDATE_SERVER, {"id": server_id, "input": server_input("other")})
    assert error["extensions"]["code"] == "not_found"


def test_an_id_already_used_is_refused(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    error = api.error(CREATE_SERVER, {"id": server_id, "input": server_input("other")})
    assert error["extensions"]["code"] == "already_exists"


def test_a_name_taken_by_another_server_is_a_problem(api):
    echo_tool(api)
    create_server(api, server_input())
    error = api.error(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": server_input()})
    assert "taken" in server_problems(error)["name"]


def test_missing_ids_of_mutations_are_not_found_and_reads_are_null(api):
    missing = str(uuid.uuid4())
    assert api.gql(READ_SERVER, {"id": missing})["mcpServers"]["mcpServer"] is None
    assert api.error(DELETE_SERVER, {"id": missing})["extensions"]["code"] == "not_found"
    assert api.error(UPDATE_SERVER, {"id": missing, "input": server_input(tools=[])})["extensions"]["code"] == "not_found"


# ---------------------------------------------------------------------------- policies


@pytest.mark.parametrize("operation", ["INSERT", "UPDATE", "DELETE"])
def test_a_write_needs_its_operation_on_the_server_document(api, operation):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    everything = ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"]
    writer = as_client(api, [allow(everything, ["financial.*"]),
                             deny([operation], ["financial.McpServer.document"])])
    attempt = {
        "INSERT": (CREATE_SERVER, {"id": str(uuid.uuid4()), "input": server_input("other")}),
        "UPDATE": (UPDATE_SERVER, {"id": server_id, "input": server_input(description="changed")}),
        "DELETE": (DELETE_SERVER, {"id": server_id}),
    }[operation]
    error = writer.error(*attempt)
    assert error["extensions"]["code"] == "permission_denied"
    assert f"{operation} on financial.McpServer.document" in error["extensions"]["hint"]
    assert api.gql(READ_SERVER, {"id": server_id})["mcpServers"]["mcpServer"]["description"] == "an assistant's tools"
    assert len(api.gql(LIST_SERVERS)["mcpServers"]["mcpServers"]) == 1


def test_a_read_by_id_needs_select_on_the_document_and_is_denied_not_null(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    reader = as_client(api, [allow(["SELECT"], ["financial.Action.*"])])
    error = reader.error(READ_SERVER, {"id": server_id})
    assert error["extensions"]["code"] == "permission_denied"
    assert "SELECT on financial.McpServer.document" in error["extensions"]["hint"]


def test_a_listing_needs_the_index_and_shows_only_what_the_reader_may_select(api):
    echo_tool(api)
    create_server(api, server_input("visible"))
    create_server(api, server_input("hidden"))
    no_index = as_client(api, [allow(["SELECT"], ["financial.McpServer.document"])])
    error = no_index.error(LIST_SERVERS)
    assert "financial.McpServer.indexes.all" in error["extensions"]["hint"]
    some = as_client(api, [allow(["SELECT"], ["financial.McpServer.indexes.all"]),
                           allow(["SELECT"], ["financial.McpServer.document"], 'context.document.name == "visible"')])
    assert [s["name"] for s in some.gql(LIST_SERVERS)["mcpServers"]["mcpServers"]] == ["visible"]


def test_an_assertion_sees_the_server_document_with_its_columns(api):
    echo_tool(api)
    writer = as_client(api, [allow(["SELECT"], ["financial.*"]),
                             allow(["INSERT"], ["financial.McpServer.document"],
                                   'context.document.enabled == false && size(context.document.tools) == 1')])
    assert writer.error(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": server_input()})[
        "extensions"]["code"] == "permission_denied"
    created = writer.gql(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": server_input(enabled=False)})
    assert created["mcpServers"]["createMcpServer"]["enabled"] is False


def test_stored_policies_that_no_longer_parse_give_a_layer_that_allows_nothing():
    server = McpServer(id=uuid.uuid4(), name="broken", description=None, instructions=None, tools=(),
                       policies=[{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"],
                                  "assertion": "this is not CEL ("}],
                       enabled=True, created_at=datetime.datetime.now(datetime.timezone.utc))
    layer = server_layer(server)
    assert layer.name.startswith('MCP server "broken" (its stored policies are invalid')
    from ledger.policy.chain import Chain
    with pytest.raises(PermissionDenied):
        Chain((layer,)).check("SELECT", "financial.Account.document", principal={}, document={},
                              has_document=True, action=None)


def test_the_layer_of_a_server_is_named_for_it():
    server = McpServer(id=uuid.uuid4(), name="assistant", description=None, instructions=None, tools=(),
                       policies=READ_ONLY, enabled=True, created_at=datetime.datetime.now(datetime.timezone.utc))
    assert server_layer(server).name == 'MCP server "assistant"'
    assert server.path == "/mcp/assistant"


# ---------------------------------------------------------------------------- validation


def test_a_bad_definition_lists_every_problem_with_its_path(api):
    echo_tool(api)
    echo_tool(api, "shout")
    disabled = echo_tool(api, "sleepy")
    lifecycle(api, "disableAction", disabled)
    gone = echo_tool(api, "gone")
    lifecycle(api, "deleteAction", gone)
    # A second action whose tool block reuses the tool name `echo`.
    publish(api, {**tool("echo_again", 'def run(event):\n    return 1\n'),
                  "tool": {"name": "echo", "description": "another echo", "inputSchema": {"type": "object"}}})
    error = api.error(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": {
        "name": "Bad Name",
        "tools": [{"name": "echo"}, {"name": "nothing"}, {"name": "echo"}, {"name": "sleepy"},
                  {"name": "gone"}, {"name": "shout", "version": 7}, {"name": "echo_again"},
                  {"name": "read_result"}],
        "policies": [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial..x"]},
                     {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"],
                      "assertion": "context.document.name =="}],
    }})
    found = server_problems(error)
    assert set(found) == {"name", "tools[1].name", "tools[2]", "tools[3].name", "tools[4].name",
                          "tools[5].version", "tools[6]", "tools[7].name", "policies[0].resources[0]",
                          "policies[1].assertion"}
    assert "no action named 'nothing'" in found["tools[1].name"]
    assert "already referenced" in found["tools[2]"]
    assert "disabled" in found["tools[3].name"] and "deleted" in found["tools[4].name"]
    assert "no version 7" in found["tools[5].version"]
    assert "two references give the tool name 'echo'" in found["tools[6]"]
    assert error["extensions"]["hint"]
    assert api.gql(LIST_SERVERS)["mcpServers"]["mcpServers"] == []


def test_a_server_may_list_the_natives_that_act_for_it_at_their_fixed_ids(api):
    refs = [{"name": name} for name in (*SERVER_NATIVE_NAMES, "graphql", "cel")]
    server = create_server(api, server_input(tools=refs))
    assert [(t["name"], t["actionId"]) for t in server["tools"]] == [
        ("program", "00000000-0000-4000-8000-000000000003"), ("invoke", "00000000-0000-4000-8000-000000000004"),
        ("get_task", "00000000-0000-4000-8000-000000000005"), ("cancel_task", "00000000-0000-4000-8000-000000000006"),
        ("graphql", "00000000-0000-4000-8000-000000000001"), ("cel", "00000000-0000-4000-8000-000000000002")]
    assert all(t["action"]["version"] == 1 for t in server["tools"])


@pytest.mark.parametrize("native", SERVER_NATIVE_NAMES)
def test_an_action_listing_a_native_that_acts_for_a_server_is_refused(api, native):
    error = create_error(api, tool("wrapper", 'def run(event):\n    return 1\n', tools=[{"name": native}]))
    found = {p["path"]: p["message"] for p in problems(error)}
    assert "only an MCP server can list it" in found["tools[0].name"]


@pytest.mark.parametrize("native", SERVER_NATIVE_NAMES)
def test_the_natives_that_act_for_a_server_are_not_callable_directly(api, native):
    native_id = str(NATIVE_TOOLS[native]["id"])
    invoked = api.error(INVOKE, {"id": native_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    started = api.error(START, {"id": native_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    for error in (invoked, started):
        assert error["extensions"]["code"] == "action_not_callable"
        assert "MCP server" in error["extensions"]["hint"]


def test_the_natives_that_act_for_a_server_describe_what_they_return(api):
    listed = api.gql("{ actions { actions(where: {native: true}) { actionId name tool { description inputSchema } } } }")
    by_name = {a["name"]: a for a in listed["actions"]["actions"]}
    assert by_name["invoke"]["tool"]["inputSchema"]["required"] == ["tool"]
    assert set(by_name["invoke"]["tool"]["inputSchema"]["properties"]) == {"tool", "input", "version", "preview", "start"}
    assert by_name["get_task"]["tool"]["inputSchema"]["required"] == ["taskId"]
    assert by_name["cancel_task"]["tool"]["inputSchema"]["required"] == ["taskId"]
    assert set(by_name["program"]["tool"]["inputSchema"]["properties"]) == {"src", "preview"}
    assert all("Returns" in by_name[n]["tool"]["description"] for n in SERVER_NATIVE_NAMES)


@pytest.mark.parametrize("name", ["read_result", "model_call", "invoke"])
def test_reserved_native_names_cannot_name_a_server_or_an_action(api, name):
    assert "reserved" in server_problems(api.error(CREATE_SERVER, {"id": str(uuid.uuid4()),
                                                                   "input": server_input(name, tools=[])}))["name"]
    assert "reserved" in {p["path"]: p["message"] for p in problems(create_error(
        api, tool(name, 'def run(event):\n    return 1\n')))}["name"]


def test_the_ids_reserved_for_agent_natives_cannot_be_taken_by_an_action(api):
    error = api.error("""mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) {
      actionId } } }""", {"id": "00000000-0000-4000-8000-000000000007",
                          "input": tool("mine", 'def run(event):\n    return 1\n')})
    assert error["extensions"]["code"] == "already_exists"


# ---------------------------------------------------------------------------- confirm


def test_confirm_is_stored_and_returned_on_a_server_reference(api):
    echo_tool(api)
    echo_tool(api, "shout")
    server = create_server(api, server_input(tools=[{"name": "echo", "confirm": True}, {"name": "shout"}]))
    read = api.gql(READ_SERVER, {"id": server["id"]})["mcpServers"]["mcpServer"]
    assert [t["confirm"] for t in read["tools"]] == [True, False]


def test_confirm_on_a_tool_s_reference_is_refused_at_write(api):
    # DESIGN 14: only an agent's or an MCP server's references may ask for a person's confirmation.
    echo_tool(api)
    error = api.error("""mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) {
      actionId } } }""", {"id": str(uuid.uuid4()), "input": tool("caller", 'def run(event):\n    return 1\n',
                                                                  tools=[{"name": "echo", "confirm": True}])})
    assert error["extensions"]["code"] == "action_definition_invalid"
    assert [p["path"] for p in error["extensions"]["problems"]] == ["tools[0].confirm"]


def test_an_action_update_equal_to_its_version_with_confirm_omitted_writes_no_version(api):
    echo_tool(api)
    doc = tool("caller", 'def run(event):\n    return tools.echo(text="x")\n', tools=[{"name": "echo"}])
    action = create(api, doc)
    again = api.gql("""mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) {
      version } } }""", {"id": action["actionId"], "input": {**doc, "tools": [{"name": "echo", "confirm": False}]}})
    assert again["actions"]["updateAction"]["version"] == 1


# ---------------------------------------------------------------------------- tokens and executions


def test_a_token_confined_to_a_server_is_refused_at_graphql_with_401(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    token = api.gql(ISSUE_TOKEN, {"client": str(api.client_id), "server": server_id})["clients"]["issueToken"]["token"]
    response = api.post("{ viewer { clientId } }", token=token)
    assert response.status_code == 401
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "unauthenticated"
    assert server_id in error["message"] and "/mcp/" in error["extensions"]["hint"]


def test_a_confined_token_carries_the_server_in_its_verified_claims(api, services):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    token = api.gql(ISSUE_TOKEN, {"client": str(api.client_id), "server": server_id})["clients"]["issueToken"]["token"]
    assert services.tokens.verify(token).mcp_server == uuid.UUID(server_id)
    plain = api.gql(ISSUE_TOKEN, {"client": str(api.client_id), "server": None})["clients"]["issueToken"]["token"]
    assert services.tokens.verify(plain).mcp_server is None


def test_a_token_for_a_missing_or_deleted_server_is_not_issued(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    api.gql(DELETE_SERVER, {"id": server_id})
    for target in (server_id, str(uuid.uuid4())):
        error = api.error(ISSUE_TOKEN, {"client": str(api.client_id), "server": target})
        assert error["extensions"]["code"] == "not_found"


def test_a_token_for_a_server_the_issuer_cannot_select_is_not_issued(api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    issuer = as_client(api, [allow(["SELECT", "UPDATE"], ["financial.Client.*"])])
    error = issuer.error(ISSUE_TOKEN, {"client": str(issuer.client_id), "server": server_id})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.McpServer.document" in error["extensions"]["hint"]


def test_a_call_not_made_through_a_server_has_no_mcp_server_id(api):
    echo_id = echo_tool(api)
    execution = invoke(api, echo_id, {"text": "x"})
    read = api.gql(EXECUTION, {"id": execution["executionId"]})["actions"]["execution"]
    assert read["mcpServerId"] is None


# ---------------------------------------------------------------------------- tenancy


def test_a_server_of_another_tenant_does_not_exist_for_the_reader(api, other_api):
    echo_tool(api)
    server_id = create_server(api, server_input())["id"]
    assert other_api.gql(READ_SERVER, {"id": server_id})["mcpServers"]["mcpServer"] is None
    assert other_api.gql(LIST_SERVERS)["mcpServers"]["mcpServers"] == []
    assert other_api.error(DELETE_SERVER, {"id": server_id})["extensions"]["code"] == "not_found"
    error = other_api.error(ISSUE_TOKEN, {"client": str(other_api.client_id), "server": server_id})
    assert error["extensions"]["code"] == "not_found"


def test_a_server_cannot_list_a_tool_of_another_tenant(api, other_api):
    echo_tool(api)
    error = other_api.error(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": server_input()})
    assert "no action named 'echo'" in server_problems(error)["tools[0].name"]


def test_two_tenants_may_give_their_servers_one_name(api, other_api):
    echo_tool(api)
    echo_tool(other_api)
    assert create_server(api, server_input())["path"] == create_server(other_api, server_input())["path"]


def test_an_action_that_already_had_a_name_now_reserved_keeps_it_and_keeps_working(api, db_url):
    import psycopg
    from psycopg.types.json import Jsonb

    doc = tool("legacy", 'def run(event):\n    return 1\n')
    action_id = publish(api, doc)
    # As if written before `invoke` was reserved: the stored name is the native's.
    with psycopg.connect(db_url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(api.tenant_id),))
        conn.execute("UPDATE actions SET name = 'invoke' WHERE id = %s", (action_id,))
        definition = conn.execute("SELECT definition FROM action_versions WHERE action_id = %s",
                                  (action_id,)).fetchone()[0]
        conn.execute("UPDATE action_versions SET definition = %s WHERE action_id = %s",
                     (Jsonb({**definition, "name": "invoke"}), action_id))
    renamed = {**doc, "name": "invoke", "config": {"runtime": "starlark", "src": 'def run(event):\n    return 2\n'}}
    updated = api.gql("""mutation($id: UUID!, $input: ActionInput!) { actions { updateAction(id: $id, input: $input) {
      version name } } }""", {"id": action_id, "input": renamed})["actions"]["updateAction"]
    assert updated == {"version": 2, "name": "invoke"}
    assert invoke(api, action_id)["invocation"]["output"] == 2
