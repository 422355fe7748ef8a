"""Schema warnings (DESIGN 16): createAction and updateAction answer `extensions.warnings` where a model
client's adapter cannot convert a tool's schema, and never fail the write; `ledger publish` prints them."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb

from live_helpers import ledger_publish, new_tenant_token
from registry_helpers import CREATE, READ, UPDATE, tool_input
from test_cli_serve import Server, workdir  # noqa: F401 - the module-scoped work dir fixture

from ledger.actions.dialects import dialect_warnings

OPENAI_FORMAT = ("OpenAI strict mode does not support the format 'uri' (only date-time, time, date, duration, "
                 "email, hostname, ipv4, ipv6, uuid); its adapter drops it, so the model is not told this rule (the "
                 "ledger still enforces it)")


def schema(**properties) -> dict:
    return {"type": "object", "properties": properties, "required": [], "additionalProperties": False}


def with_schema(input_schema: dict, name: str = "echo") -> dict:
    doc = tool_input(name)
    doc["tool"]["inputSchema"] = input_schema
    return doc


def write(api, document: str, action_id: str, doc: dict) -> dict:
    """The whole response body of a write that succeeds."""
    body = api.post(document, {"id": action_id, "input": doc}).json()
    assert "errors" not in body, body
    return body


def warnings_of(body: dict) -> list[dict]:
    return (body.get("extensions") or {}).get("warnings") or []


def create(api, doc: dict, action_id: str | None = None) -> dict:
    return write(api, CREATE, action_id or str(uuid.uuid4()), doc)


# ---------------------------------------------------------------------------- through the API


def test_an_optional_property_is_no_warning_and_the_answer_has_no_extensions(api):
    body = create(api, with_schema({"type": "object", "properties": {"text": {"type": "string"},
                                                                     "memo": {"type": "string"}},
                                    "required": ["text"]}))
    assert "extensions" not in body
    assert body["data"]["actions"]["createAction"]["version"] == 1


def test_a_format_openai_strict_mode_lacks_is_a_warning_naming_openai_and_the_path(api):
    body = create(api, with_schema(schema(text={"type": "string"}, site={"type": "string", "format": "uri"})))
    assert warnings_of(body) == [{"field": "actions.createAction", "path": "tool.inputSchema.properties.site.format",
                                  "client": "openai", "message": OPENAI_FORMAT}]


def test_a_supported_format_is_no_warning(api):
    assert warnings_of(create(api, with_schema(schema(id={"type": "string", "format": "uuid"})))) == []


def test_the_write_with_warnings_succeeds_and_the_action_is_stored(api):
    action_id = str(uuid.uuid4())
    input_schema = schema(site={"type": "string", "format": "uri"})
    assert warnings_of(create(api, with_schema(input_schema), action_id))
    stored = api.gql(READ, {"id": action_id})["actions"]["action"]
    assert stored["version"] == 1 and stored["tool"]["inputSchema"] == input_schema


def test_a_recursive_ref_is_a_gemini_warning(api):
    tree = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "additionalProperties": False,
            "required": ["root"],
            "$defs": {"node": {"type": "object", "additionalProperties": False, "required": ["name", "children"],
                               "properties": {"name": {"type": "string"},
                                              "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}}
    assert warnings_of(create(api, with_schema(tree))) == [{
        "field": "actions.createAction", "path": "tool.inputSchema.$defs.node.properties.children.items.$ref",
        "client": "gemini",
        "message": "Gemini accepts no `$ref`, and '#/$defs/node' is recursive, so its adapter cannot inline it; "
                   "give the nested levels a schema of their own"}]


def test_a_ref_that_is_not_recursive_is_inlined_without_a_warning(api):
    doc = {"type": "object", "properties": {"amount": {"$ref": "#/$defs/money"}}, "required": ["amount"],
           "additionalProperties": False, "$defs": {"money": {"type": "integer", "minimum": 1}}}
    assert warnings_of(create(api, with_schema(doc))) == []


def test_const_is_a_gemini_warning(api):
    assert warnings_of(create(api, with_schema(schema(version={"const": 1})))) == [{
        "field": "actions.createAction", "path": "tool.inputSchema.properties.version.const", "client": "gemini",
        "message": "Gemini accepts no `const`; its adapter drops it, so the model is not told this rule (an `enum` "
                   "of one string says the same to every client)"}]


def test_a_type_list_is_a_gemini_warning_but_a_nullable_type_is_not(api):
    body = create(api, with_schema(schema(key={"type": ["string", "integer"]}, memo={"type": ["string", "null"]})))
    assert warnings_of(body) == [{
        "field": "actions.createAction", "path": "tool.inputSchema.properties.key.type", "client": "gemini",
        "message": "Gemini accepts no list of types; its adapter cannot say string or integer in one property "
                   "(give it one type)"}]


def test_update_action_answers_the_warnings_of_the_version_it_writes(api):
    action_id = str(uuid.uuid4())
    assert warnings_of(create(api, with_schema(schema(text={"type": "string"})), action_id)) == []
    body = write(api, UPDATE, action_id, with_schema(schema(text={"type": "string", "format": "uri"})))
    assert body["data"]["actions"]["updateAction"]["version"] == 2
    assert warnings_of(body) == [{"field": "actions.updateAction", "path": "tool.inputSchema.properties.text.format",
                                  "client": "openai", "message": OPENAI_FORMAT}]


def test_aliases_give_each_warning_the_field_of_its_write(api):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    document = """mutation($a: UUID!, $b: UUID!, $x: ActionInput!, $y: ActionInput!) { writes: actions {
      clean: createAction(id: $a, input: $x) { version }
      odd: createAction(id: $b, input: $y) { version } } }"""
    body = api.post(document, {"a": first, "b": second, "x": with_schema(schema(n={"type": "integer"}), "one"),
                               "y": with_schema(schema(k={"const": "k"}), "two")}).json()
    assert "errors" not in body, body
    assert [(w["field"], w["path"], w["client"]) for w in warnings_of(body)] == [
        ("writes.odd", "tool.inputSchema.properties.k.const", "gemini")]


def test_a_dry_run_answers_the_warnings_and_writes_nothing(api):
    action_id = str(uuid.uuid4())
    body = api.post(CREATE, {"id": action_id, "input": with_schema(schema(k={"const": "k"}))},
                    headers={"Ledger-Dry-Run": "true"}).json()
    assert [w["client"] for w in warnings_of(body)] == ["gemini"]
    assert api.gql(READ, {"id": action_id})["actions"]["action"] is None


def test_a_failed_request_answers_no_warnings(api):
    document = """mutation($a: UUID!, $x: ActionInput!) { actions {
      w: createAction(id: $a, input: $x) { version }
      again: createAction(id: $a, input: $x) { version } } }"""
    body = api.post(document, {"a": str(uuid.uuid4()), "x": with_schema(schema(k={"const": "k"}))}).json()
    assert body["errors"][0]["extensions"]["code"] == "already_exists"
    assert "extensions" not in body


def test_an_action_that_already_had_a_now_reserved_name_is_warned_about_on_update(api, db_url):
    action_id = str(uuid.uuid4())
    create(api, with_schema(schema(text={"type": "string"}), "legacy"), action_id)
    # As if written before `read_result` was reserved: the stored name is the native's.
    with psycopg.connect(db_url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(api.tenant_id),))
        conn.execute("UPDATE actions SET name = 'read_result' WHERE id = %s", (action_id,))
        definition = conn.execute("SELECT definition FROM action_versions WHERE action_id = %s",
                                  (action_id,)).fetchone()[0]
        conn.execute("UPDATE action_versions SET definition = %s WHERE action_id = %s",
                     (Jsonb({**definition, "name": "read_result"}), action_id))
    doc = with_schema(schema(text={"type": "string"}, memo={"type": "string"}), "read_result")
    body = write(api, UPDATE, action_id, doc)
    assert body["data"]["actions"]["updateAction"]["version"] == 2
    assert warnings_of(body) == [{
        "field": "actions.updateAction", "path": "name", "client": "all",
        "message": "'read_result' is now reserved for the native read_result tool: this action keeps its name and "
                   "keeps working, but a model or an MCP client that also sees the native cannot tell the two "
                   "apart; rename it"}]


def test_a_native_kind_is_not_warned_about_the_natives_own_schema(api):
    # graphql's `variables` is an object of any keys, which OpenAI strict mode cannot say; the writer of a
    # graphql action cannot change that schema, so there is nothing to tell them.
    body = create(api, {"name": "my_graphql", "kind": "graphql"})
    assert body["data"]["actions"]["createAction"]["kind"] == "graphql"
    assert "extensions" not in body


# ---------------------------------------------------------------------------- the rules, pure


def rules(input_schema: dict, kind: str = "tool", output_schema: dict | None = None) -> list[tuple[str, str]]:
    block = {"inputSchema": input_schema, "outputSchema": output_schema}
    return [(w["path"], w["client"]) for w in dialect_warnings(block, kind)]


def test_objects_listing_their_properties_are_closed_by_the_adapter_without_a_warning():
    assert rules({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}}) == []


def test_an_open_map_or_an_object_without_properties_cannot_be_closed_for_openai():
    assert rules(schema(totals={"type": "object", "additionalProperties": {"type": "integer"}},
                        anything={"type": "object"}, empty={"type": "object", "additionalProperties": False})) == [
        ("tool.inputSchema.properties.totals.additionalProperties", "openai"),
        ("tool.inputSchema.properties.anything", "openai")]


@pytest.mark.parametrize("keyword, value", [
    ("patternProperties", {"^x": {"type": "string"}}), ("propertyNames", {"maxLength": 3}),
    ("minProperties", 1), ("maxProperties", 2), ("minLength", 1), ("maxLength", 9), ("uniqueItems", True),
    ("contains", {"type": "integer"}), ("allOf", [{"type": "object"}]), ("oneOf", [{"type": "object"}]),
    ("not", {"type": "null"}), ("if", {"type": "object"}), ("dependentRequired", {"a": ["b"]}),
])
def test_keywords_outside_openai_strict_modes_subset_are_warnings(keyword, value):
    found = rules(schema(field={"type": "object", "properties": {"a": {"type": "string"}}, keyword: value}))
    assert (f"tool.inputSchema.properties.field.{keyword}", "openai") in found


def test_supported_keywords_are_no_warning():
    assert rules(schema(n={"type": "number", "minimum": 0, "maximum": 9, "multipleOf": 0.5},
                        s={"type": "string", "pattern": "^[a-z]+$", "format": "date-time"},
                        l={"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1,
                           "maxItems": 3},
                        u={"anyOf": [{"type": "string"}, {"type": "integer"}]})) == []


def test_a_self_reference_to_the_root_is_recursive_and_an_unused_recursive_definition_is_not():
    assert rules({"type": "object", "properties": {"next": {"$ref": "#"}}}) == [
        ("tool.inputSchema.properties.next.$ref", "gemini")]
    unused = {"type": "object", "properties": {"a": {"type": "string"}},
              "$defs": {"loop": {"type": "object", "properties": {"again": {"$ref": "#/$defs/loop"}}}}}
    assert rules(unused) == []


def test_the_output_schema_is_checked_only_where_a_model_is_asked_for_it():
    output = schema(k={"const": 1})
    assert rules(schema(), "tool", output) == []
    assert rules(schema(), "agent", output) == [("tool.outputSchema.properties.k.const", "gemini")]


# ---------------------------------------------------------------------------- ledger publish


@pytest.fixture(scope="module")
def server(workdir):  # noqa: F811
    served = Server(workdir / "data")
    yield served
    served.stop()


def test_ledger_publish_prints_each_warning_with_its_file_and_exits_0(server, tmp_path):
    token = new_tenant_token(server)
    (tmp_path / "ping.star").write_text("def run(event):\n    return event[\"data\"]\n")
    toml = tmp_path / "ping.toml"
    toml.write_text(f'''id = "{uuid.uuid4()}"
name = "ping"
description = "Answers its input"
kind = "tool"
src = "ping.star"

[tool]
name = "ping"
description = "Answers its input"

[tool.inputSchema]
type = "object"
additionalProperties = false
properties.site = {{ type = "string", format = "uri" }}
''')
    result = ledger_publish(server, token, str(toml))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"warning: {toml}: tool.inputSchema.properties.site.format: openai: {OPENAI_FORMAT}"]
    assert result.stdout.splitlines()[-1] == "1 action(s): 1 created, 0 updated, 0 unchanged"
