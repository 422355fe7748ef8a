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
                               "y": with_schema(schema(k={"const": 1}), "two")}).json()
    assert "errors" not in body, body
    assert [(w["field"], w["path"], w["client"]) for w in warnings_of(body)] == [
        ("writes.odd", "tool.inputSchema.properties.k.const", "gemini")]


def test_a_dry_run_answers_the_warnings_and_writes_nothing(api):
    action_id = str(uuid.uuid4())
    body = api.post(CREATE, {"id": action_id, "input": with_schema(schema(k={"const": 1}))},
                    headers={"Ledger-Dry-Run": "true"}).json()
    assert [w["client"] for w in warnings_of(body)] == ["gemini"]
    assert api.gql(READ, {"id": action_id})["actions"]["action"] is None


def test_a_failed_request_answers_no_warnings(api):
    document = """mutation($a: UUID!, $x: ActionInput!) { actions {
      w: createAction(id: $a, input: $x) { version }
      again: createAction(id: $a, input: $x) { version } } }"""
    body = api.post(document, {"a": str(uuid.uuid4()), "x": with_schema(schema(k={"const": 1}))}).json()
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
    assert rules({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}) == []


def test_a_property_of_any_value_cannot_be_said_in_openai_strict_mode():
    # Strict mode wants a type on every schema: `{}` makes the adapter fall back to non-strict.
    assert rules({"type": "object", "properties": {"b": {}}}) == [("tool.inputSchema.properties.b", "openai")]


def test_an_open_map_or_an_object_without_properties_cannot_be_closed_for_openai():
    assert rules(schema(totals={"type": "object", "additionalProperties": {"type": "integer"}},
                        anything={"type": "object"}, empty={"type": "object", "additionalProperties": False})) == [
        ("tool.inputSchema.properties.totals.additionalProperties", "openai"),
        ("tool.inputSchema.properties.anything", "openai")]


@pytest.mark.parametrize("keyword, value", [
    ("patternProperties", {"^x": {"type": "string"}}), ("propertyNames", {"maxLength": 3}),
    ("minProperties", 1), ("maxProperties", 2), ("minLength", 1), ("maxLength", 9), ("uniqueItems", True),
    ("contains", {"type": "integer"}), ("allOf", [{"type": "object"}]), ("oneOf", [{"type": "string"}]),
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


# ---------------------------------------------------------------------------- one rule set

# A sample value of every assertion keyword of draft 2020-12 (and draft 7's), each on a property whose
# type suits it, so that the converter meets each keyword alone.
KEYWORD_SAMPLES = [
    ("string", "minLength", 1), ("string", "maxLength", 9), ("string", "pattern", "^[a-z]+$"),
    ("string", "format", "uri"), ("string", "format", "date"), ("string", "enum", ["a", "b"]), ("string", "const", "a"),
    ("number", "minimum", 0), ("number", "maximum", 9), ("number", "exclusiveMinimum", 0),
    ("number", "exclusiveMaximum", 9), ("number", "multipleOf", 0.5), ("integer", "const", 1),
    ("array", "minItems", 1), ("array", "maxItems", 3), ("array", "uniqueItems", True),
    ("array", "contains", {"type": "string"}), ("array", "minContains", 1), ("array", "prefixItems", [{"type": "string"}]),
    ("array", "unevaluatedItems", False),
    ("object", "minProperties", 1), ("object", "maxProperties", 2), ("object", "propertyNames", {"maxLength": 3}),
    ("object", "patternProperties", {"^x": {"type": "string"}}), ("object", "dependentRequired", {"a": ["b"]}),
    ("object", "dependentSchemas", {"a": {"required": ["b"]}}), ("object", "unevaluatedProperties", False),
    ("object", "additionalProperties", {"type": "string"}), ("object", "additionalProperties", True),
    ("string", "allOf", [{"minLength": 1}]), ("string", "anyOf", [{"minLength": 1}, {"maxLength": 0}]),
    ("string", "oneOf", [{"type": "string"}]), ("string", "not", {"const": "x"}), ("string", "if", {"const": "x"}),
    ("string", "title", "Name"), ("string", "default", "a"), ("string", "examples", ["a"]), ("string", "$comment", "c"),
]


def _field(type_: str, keyword: str, value) -> dict:
    field = {"type": type_, keyword: value}
    if type_ == "array":
        field["items"] = {"type": "string"}
    if type_ == "object":
        field["properties"] = {"a": {"type": "string"}, "b": {"type": "string"}}
    return field


CORPUS = [schema(field=_field(*sample)) for sample in KEYWORD_SAMPLES] + [
    {"type": "object", "properties": {"field": _field(*sample)}, "required": ["field"]} for sample in KEYWORD_SAMPLES
] + [
    {"type": "object", "properties": {"amount": {"$ref": "#/$defs/money"}, "memo": {"type": ["string", "null"]}},
     "$defs": {"money": {"type": "integer", "minimum": 1, "maxLength": 3}}},
    {"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}},
    {"type": "object", "properties": {"anything": {}}},
    {"type": "object", "additionalProperties": False},
    {"type": "object", "anyOf": [{"required": ["a"]}], "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}},
]
ANNOTATION_KEYWORDS = {"title", "default", "examples", "$comment", "$schema", "$id"}


def _null_wrapped(converted):
    """What strict mode made nullable: `{"anyOf": [X, {"type": "null"}]}` is X."""
    if isinstance(converted, dict) and list(converted) == ["anyOf"] and len(converted["anyOf"]) == 2 \
            and converted["anyOf"][1] == {"type": "null"}:
        return converted["anyOf"][0]
    return None


def keeps_every_rule(original, converted) -> bool:
    """Whether `converted` says every rule of `original`, at the same place, up to strict mode's
    rewrites that keep what is accepted: an optional property made nullable, an object closed."""
    if not isinstance(original, dict):
        return original == converted
    wrapped = _null_wrapped(converted)
    if wrapped is not None and keeps_every_rule(original, wrapped):
        return True
    if not isinstance(converted, dict):
        return False
    for key, value in original.items():
        if key in ANNOTATION_KEYWORDS:
            continue
        mine = converted.get(key, "<absent>")
        if key == "type":
            types = value if isinstance(value, list) else [value]
            ok = mine == value or mine == [*types, "null"]
        elif key == "enum":
            ok = mine in (value, [*value, None])
        elif key == "required":
            ok = isinstance(mine, list) and set(value) <= set(mine)
        elif key in ("properties", "$defs") and isinstance(value, dict):
            ok = isinstance(mine, dict) and set(mine) == set(value) and all(
                keeps_every_rule(value[k], mine[k]) for k in value)
        elif key == "anyOf" and isinstance(value, list):
            ok = isinstance(mine, list) and len(mine) == len(value) and all(
                keeps_every_rule(a, b) for a, b in zip(value, mine))
        elif key == "items" and isinstance(value, dict):
            ok = keeps_every_rule(value, mine)
        else:
            ok = mine == value
        if not ok:
            return False
    return True


@pytest.mark.parametrize("input_schema", CORPUS)
def test_an_openai_warning_appears_exactly_when_its_adapter_changes_what_the_schema_says(input_schema):
    from ledger.models.dialects import to_openai

    conversion = to_openai(input_schema)
    warned = [w for w in dialect_warnings({"inputSchema": input_schema}) if w["client"] == "openai"]
    unchanged = conversion.strict and keeps_every_rule(input_schema, conversion.schema)
    assert bool(warned) == (not unchanged), (warned, conversion.schema)


@pytest.mark.parametrize("input_schema", CORPUS)
def test_every_warning_is_a_change_the_converters_report_at_its_path(input_schema):
    from ledger.models.dialects import to_gemini, to_openai

    changes = [*to_openai(input_schema).changes, *to_gemini(input_schema).changes]
    assert [(w["client"], w["message"]) for w in dialect_warnings({"inputSchema": input_schema})] == \
        [(c.client, c.message) for c in changes]
