"""The action registry: versions, lifecycle, natives, and reads."""

import uuid

from registry_helpers import CREATE, READ, UPDATE, create, create_error, lifecycle, problems, tool_input

SEED_CREATE_TOOL = """
mutation CreateTool($id: UUID!, $src: String!) {
  actions {
    createAction(id: $id, input: {
      name: "get_account_activity"
      description: "Recent transfers of an account"
      kind: "tool"
      config: { runtime: "starlark", src: $src }
      tool: {
        name: "get_account_activity"
        description: "Lists the latest transfers of one account"
        inputSchema: {
          type: "object"
          properties: { account_id: { type: "string", format: "uuid" }, limit: { type: "integer", minimum: 1 } }
          required: ["account_id"]
        }
      }
    }) { actionId version status tool { inputSchema } config }
  }
}
"""
SEED_SRC = '''
ACTIVITY = """query($id: UUID!) { financial { account(id: $id) { balance transfers(first: 10) { id amount } } } }"""

def run(event):
    r = graphql(ACTIVITY, variables={"id": event["data"]["account_id"]})
    return r["financial"]["account"]
'''


def test_seed_create_tool_mutation_works_verbatim(api):
    action_id = str(uuid.uuid4())
    created = api.gql(SEED_CREATE_TOOL, {"id": action_id, "src": SEED_SRC})["actions"]["createAction"]
    assert created["version"] == 1
    assert created["status"] == "UNPUBLISHED"
    assert created["config"] == {"runtime": "starlark", "src": SEED_SRC}
    assert created["tool"]["inputSchema"]["required"] == ["account_id"]


def test_create_writes_version_one_unpublished(api):
    action = create(api, tool_input())
    assert (action["version"], action["latestVersion"], action["status"], action["pending"]) == (1, 1, "UNPUBLISHED", None)
    assert action["enabled"] is True and action["native"] is False
    assert action["tool"]["output"] == {"offload": "AUTO"}


def test_update_writes_a_new_version_and_old_versions_stay_readable(api):
    action = create(api, tool_input())
    changed = tool_input(description="a better description")
    updated = api.gql(UPDATE, {"id": action["actionId"], "input": changed})["actions"]["updateAction"]
    assert (updated["version"], updated["latestVersion"]) == (2, 2)
    old = api.gql(READ, {"id": action["actionId"], "version": 1})["actions"]["action"]
    assert old["description"] == "the echo tool"
    assert old["version"] == 1 and old["latestVersion"] == 2


def test_update_equal_to_latest_writes_nothing(api):
    action = create(api, tool_input())
    again = api.gql(UPDATE, {"id": action["actionId"], "input": tool_input()})["actions"]["updateAction"]
    assert again["version"] == 1 and again["latestVersion"] == 1


def test_create_with_an_existing_id_is_rejected(api):
    action = create(api, tool_input())
    error = api.error(CREATE, {"id": action["actionId"], "input": tool_input("other")})
    assert error["extensions"]["code"] == "already_exists"


def test_names_are_unique_per_tenant(api, other_api):
    create(api, tool_input("echo"))
    assert problems(create_error(api, tool_input("echo")))[0]["path"] == "name"
    create(other_api, tool_input("echo"))


def test_update_of_a_missing_action_is_not_found(api):
    error = api.error(UPDATE, {"id": str(uuid.uuid4()), "input": tool_input()})
    assert error["extensions"]["code"] == "not_found"


def test_publish_makes_the_action_active(api):
    action = create(api, tool_input())
    assert lifecycle(api, "publishAction", action["actionId"])["status"] == "ACTIVE"


def test_lifecycle_writes_no_version(api):
    action = create(api, tool_input())
    for op in ("publishAction", "disableAction", "enableAction"):
        assert lifecycle(api, op, action["actionId"])["latestVersion"] == 1


def test_disable_then_enable_returns_to_active(api):
    action = create(api, tool_input())
    lifecycle(api, "publishAction", action["actionId"])
    assert lifecycle(api, "disableAction", action["actionId"])["status"] == "DISABLED"
    assert lifecycle(api, "enableAction", action["actionId"])["status"] == "ACTIVE"


def test_delete_marks_deleted_and_frees_the_name(api):
    action = create(api, tool_input())
    assert lifecycle(api, "deleteAction", action["actionId"])["status"] == "DELETED"
    create(api, tool_input())


def test_publishing_a_disabled_action_says_to_enable_it(api):
    action = create(api, tool_input())
    lifecycle(api, "disableAction", action["actionId"])
    error = api.error("mutation($id: UUID!) { actions { publishAction(id: $id) { status } } }", {"id": action["actionId"]})
    assert "enableAction" in error["extensions"]["hint"]


def test_lifecycle_of_a_missing_action_is_not_found(api):
    error = api.error("mutation($id: UUID!) { actions { publishAction(id: $id) { status } } }", {"id": str(uuid.uuid4())})
    assert error["extensions"]["code"] == "not_found"


def test_reading_a_missing_action_returns_null(api):
    assert api.gql(READ, {"id": str(uuid.uuid4())})["actions"]["action"] is None


def test_actions_of_another_tenant_do_not_exist(api, other_api):
    action = create(api, tool_input())
    assert other_api.gql(READ, {"id": action["actionId"]})["actions"]["action"] is None
    error = other_api.error(UPDATE, {"id": action["actionId"], "input": tool_input()})
    assert error["extensions"]["code"] == "not_found"


def test_native_tools_exist_in_every_tenant(api, other_api):
    for client in (api, other_api):
        listed = client.gql("{ actions { actions(where: {native: true}) { name native version status kind } } }")
        assert {a["name"] for a in listed["actions"]["actions"]} == {
            "graphql", "cel", "program", "invoke", "get_task", "cancel_task", "read_result", "model_call"}
        assert all(a["native"] and a["version"] == 1 and a["status"] == "ACTIVE" for a in listed["actions"]["actions"])


def test_native_tools_are_readable_by_their_fixed_id(api):
    listed = api.gql("{ actions { actions(where: {native: true}) { actionId name } } }")["actions"]["actions"]
    for native in listed:
        read = api.gql(READ, {"id": native["actionId"]})["actions"]["action"]
        assert read["name"] == native["name"] and read["tool"]["inputSchema"]["type"] == "object"


def test_native_names_are_reserved(api):
    assert "reserved" in problems(create_error(api, tool_input("graphql")))[0]["message"]


def test_listing_filters_by_name_and_pages_with_after(api):
    ids = [create(api, tool_input(f"tool_{i}"))["actionId"] for i in range(3)]
    named = api.gql('{ actions { actions(where: {name: "tool_1"}) { actionId } } }')["actions"]["actions"]
    assert [a["actionId"] for a in named] == [ids[1]]
    page = api.gql("{ actions { actions(where: {native: false}, first: 2) { actionId } } }")["actions"]["actions"]
    assert [a["actionId"] for a in page] == ids[:2]
    rest = api.gql("query($after: String) { actions { actions(where: {native: false}, after: $after) { actionId } } }",
                   {"after": ids[1]})["actions"]["actions"]
    assert [a["actionId"] for a in rest] == ids[2:]


def test_a_tool_written_earlier_in_the_same_request_can_be_referenced(api):
    callee, caller = str(uuid.uuid4()), str(uuid.uuid4())
    caller_doc = tool_input("caller", src='def run(event):\n    return tools.echo({"text": "x"})\n',
                            tools=[{"name": "echo"}])
    data = api.gql(
        """mutation($a: UUID!, $b: UUID!, $callee: ActionInput!, $caller: ActionInput!) { actions {
             first: createAction(id: $a, input: $callee) { version }
             second: createAction(id: $b, input: $caller) { tools { name actionId actionVersion action { name } } } } }""",
        {"a": callee, "b": caller, "callee": tool_input("echo"), "caller": caller_doc},
    )
    assert data["actions"]["second"]["tools"] == [
        {"name": "echo", "actionId": callee, "actionVersion": None, "action": {"name": "echo"}}]


def test_writes_need_insert_on_the_action_document(api):
    token = _limited_token(api, [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"]}])
    error = api.as_client(token).error(CREATE, {"id": str(uuid.uuid4()), "input": tool_input()})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Action.document" in error["extensions"]["hint"]


def _limited_token(api, policies: list[dict]) -> str:
    client_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $p: [PolicyStatementInput!]!) { clients { createClient(id: $id, input: {name: "limited", policies: $p}) { id } } }""",
            {"id": client_id, "p": policies})
    return api.gql("mutation($id: UUID!) { clients { issueToken(clientId: $id) { token } } }",
                   {"id": client_id})["clients"]["issueToken"]["token"]


def test_a_loaded_definition_read_as_text_equals_the_jsonb_loaders(api, services):
    import time

    from ledger.actions.registry import load_action
    from ledger.policy.chain import Chain
    from ledger.policy.principal import Principal
    from ledger.scope import Scope

    action_id = uuid.uuid4()
    api.gql(SEED_CREATE_TOOL, {"id": str(action_id), "src": SEED_SRC})
    with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 30) as conn:
        scope = Scope(conn=conn, principal=Principal(api.tenant_id, api.client_id, "admin", {}), chain=Chain(()),
                      services=services, deadline=time.monotonic() + 30)
        record = load_action(scope, action_id)
        stored = conn.execute("SELECT definition FROM action_versions WHERE tenant_id = %s AND action_id = %s",
                              (api.tenant_id, action_id)).fetchone()["definition"]
    assert record["definition"] == stored and record["config"]["src"] == SEED_SRC
