"""Nothing the ledger validates fetches anything (DESIGN section 17): a schema's `$schema` names a known
dialect or the write is refused; `$ref` and `$id` resolve only inside the schema; call-time validation of a
stored schema never fetches either. Each test runs a local HTTP server and asserts it received no request."""

from __future__ import annotations

import http.server
import threading
import uuid

import orjson
import psycopg
import pytest

from invoke_helpers import invoke, publish, tool
from registry_helpers import CREATE, UPDATE, create, create_error, problems, tool_input


class _Recorder(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.requests.append(self.path)
        body = orjson.dumps({"type": "object", "properties": {"leak": {"const": "SECRET-FROM-INSIDE"}}})
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def remote():
    """A local HTTP server standing for an internal service; `remote.requests` lists every path asked for."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()
    server.server_close()


def with_input_schema(schema) -> dict:
    doc = tool_input()
    doc["tool"]["inputSchema"] = schema
    return doc


def assert_refused_at(error: dict, path: str) -> dict:
    found = [p for p in problems(error) if p["path"] == path]
    assert found, problems(error)
    assert "SECRET" not in str(error)
    return found[0]


def test_a_schema_naming_a_remote_dialect_is_refused_without_fetching(api, remote):
    error = create_error(api, with_input_schema({"type": "object", "$schema": f"{remote.url}/x.json"}))
    problem = assert_refused_at(error, "tool.inputSchema.$schema")
    assert f"{remote.url}/x.json" in problem["message"]
    assert "https://json-schema.org/draft/2020-12/schema" in problem["message"]  # says what to write instead
    assert remote.requests == []


def test_an_output_schema_naming_a_remote_dialect_is_refused_without_fetching(api, remote):
    doc = tool_input()
    doc["tool"]["outputSchema"] = {"$schema": f"{remote.url}/out.json", "type": "object"}
    assert_refused_at(create_error(api, doc), "tool.outputSchema.$schema")
    assert remote.requests == []


def test_an_update_naming_a_remote_dialect_is_refused_without_fetching(api, remote):
    action_id = create(api, tool_input())["actionId"]
    body = api.post(UPDATE, {"id": action_id, "input": with_input_schema(
        {"type": "object", "$schema": f"{remote.url}/x.json"})}).json()
    assert_refused_at(body["errors"][0], "tool.inputSchema.$schema")
    assert remote.requests == []


@pytest.mark.parametrize("schema_text", [
    '{"type": "object", "properties": {"a": {"$schema": "URL/nested.json"}}}',
    '{"type": "object", "properties": {"a": {"$id": "URL/a", "$schema": "URL/nested.json"}}}',
    '{"type": "object", "$defs": {"d": {"$schema": "http://json-schema.org/draft-07/schema#"}}}',
])
def test_a_nested_schema_keyword_is_refused_without_fetching(api, remote, schema_text):
    schema = orjson.loads(schema_text.replace("URL", remote.url))
    error = create_error(api, with_input_schema(schema))
    assert any(p["path"].endswith(".$schema") for p in problems(error)), problems(error)
    assert remote.requests == []


@pytest.mark.parametrize("schema_text", [
    '{"$ref": "URL/root.json"}',
    '{"type": "object", "properties": {"a": {"$ref": "URL/x.json"}}}',
    '{"type": "object", "properties": {"a": {"$ref": "URL/x.json#/properties/leak"}}}',
    '{"$id": "URL/base/", "type": "object", "properties": {"a": {"$ref": "other.json"}}}',
    '{"type": "object", "properties": {"a": {"$dynamicRef": "URL/x.json#anchor"}}}',
])
def test_a_reference_outside_the_schema_is_refused_without_fetching(api, remote, schema_text):
    schema = orjson.loads(schema_text.replace("URL", remote.url))
    error = create_error(api, with_input_schema(schema))
    assert any(p["path"].startswith("tool.inputSchema") for p in problems(error)), problems(error)
    assert "SECRET" not in str(error)
    assert remote.requests == []


def test_a_property_named_schema_is_just_a_property(api):
    create(api, with_input_schema({"type": "object", "properties": {"doc": {"type": "object", "properties": {
        "$schema": {"type": "string"}}}, "text": {"type": "string", "default": {"$schema": "anything"}}}}))


@pytest.mark.parametrize("dialect", [
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
    "http://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
    "https://json-schema.org/draft-07/schema#",
])
def test_a_known_dialect_is_accepted(api, dialect):
    schema = {"$schema": dialect, "type": "object", "properties": {"text": {"type": "string"}}}
    assert create(api, with_input_schema(schema))["tool"]["inputSchema"] == schema


@pytest.mark.parametrize("dialect", [
    "http://json-schema.org/draft-04/schema#", "https://json-schema.org/draft/2020-12/schema/", 5, None])
def test_an_unsupported_dialect_is_refused(api, dialect):
    assert_refused_at(create_error(api, with_input_schema({"$schema": dialect, "type": "object"})),
                      "tool.inputSchema.$schema")


def test_a_draft_07_schema_is_validated_as_draft_07(api):
    # In draft-07 an `items` array is a tuple; in 2020-12 it would be a problem at write.
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}}}
    action_id = publish(api, tool("pairs", "def run(event):\n    return event['data']['pair']\n", schema=schema))
    assert invoke(api, action_id, {"pair": ["a", 1]})["invocation"]["output"] == ["a", 1]
    failed = invoke(api, action_id, {"pair": ["a", "b"]})
    assert failed["invocation"]["error"]["code"] == "action_input_invalid"


def test_a_stored_schema_naming_a_remote_dialect_is_never_fetched_at_call_time(api, remote, db_url):
    """A version written before the check existed: calling it validates offline, as draft 2020-12."""
    output_schema = {"type": "object"}
    action_id = publish(api, tool("old", "def run(event):\n    return {'ok': event['data']['n']}\n",
                                  schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                                  output_schema=output_schema))
    with psycopg.connect(db_url) as conn:  # as the owner: what an older server let through
        conn.execute(
            "UPDATE action_versions SET definition = jsonb_set(jsonb_set(definition,"
            " '{tool,inputSchema,$schema}', to_jsonb(%s::text)), '{tool,outputSchema,$schema}', to_jsonb(%s::text))"
            " WHERE action_id = %s", (f"{remote.url}/in.json", f"{remote.url}/out.json", uuid.UUID(action_id)))
    assert invoke(api, action_id, {"n": 1})["invocation"]["output"] == {"ok": 1}
    assert invoke(api, action_id, {"n": "x"})["invocation"]["error"]["code"] == "action_input_invalid"
    assert remote.requests == []
