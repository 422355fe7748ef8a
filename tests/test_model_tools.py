"""Kind `model` (DESIGN 13): a typed function computed by a model. One structured-output request per call,
validated against the outputSchema with one corrective retry, recorded as a `model_call` child; through
the HTTP API on the real PostgreSQL, with the `scripted` provider (and the openai and anthropic adapters
against a local server speaking their wire formats)."""

from __future__ import annotations

import json
import uuid

import pytest

from invoke_helpers import ALL_ACCESS, publish, tool
from registry_helpers import create, create_error, problems
from test_queue import start, wait_for, worker  # noqa: F401 - the worker fixture

from ledger.actions.natives import MODEL_CALL_ID
from ledger.config import Settings
from ledger.models import UserMessage

INSTRUCTIONS = "Classify the payment's memo into one category."
INPUT_SCHEMA = {"type": "object", "properties": {"memo": {"type": "string"}}, "required": ["memo"],
                "additionalProperties": False}
OUTPUT_SCHEMA = {"type": "object", "properties": {"category": {"enum": ["rent", "food", "other"]},
                                                  "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
                 "required": ["category", "confidence"], "additionalProperties": False}

INVOKE = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  executionId status invocation { output error { code message hint } usage }
  children { executionId status callSequence depth actionId
             invocation { input output error { code message hint } } } } } }"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.json"
    path.write_text("[]")
    return path


@pytest.fixture
def settings(db_url, tmp_path, model_server, script) -> Settings:
    models = tmp_path / "models.toml"
    models.write_text(f'''[scripted]
type = "scripted"
script = "{script.name}"

[local]
type = "openai"
base_url = "{model_server.url}/v1"

[claude]
type = "anthropic"
base_url = "{model_server.url}"

[closed]
type = "scripted"
script = "{script.name}"
tenants = ["{uuid.uuid4()}"]
''')
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10, models_file=models,
                    mcp_allowed_hosts="127.0.0.1:*,testserver")


def scripted(services, script, *responses) -> object:
    """The scripted provider, answering `responses` from now on."""
    script.write_text(json.dumps(list(responses)))
    return services.models.providers["scripted"]


def model_tool(name: str = "classify", provider: str = "scripted", output_schema: dict | None = None,
               **model) -> dict:
    return {"name": name, "kind": "model", "description": "Classifies a memo",
            "config": {"model": {"provider": provider, "name": "test-model", **model}, "instructions": INSTRUCTIONS},
            "tool": {"name": name, "description": "Classifies a payment memo.", "inputSchema": INPUT_SCHEMA,
                     "outputSchema": OUTPUT_SCHEMA if output_schema is None else output_schema},
            "policies": ALL_ACCESS}


def invoke(api, action_id: str, input: dict) -> dict:
    payload = {"executionId": str(uuid.uuid4()), "input": input}
    return api.gql(INVOKE, {"id": action_id, "input": payload})["actions"]["invokeAction"]


def correction(problem: str) -> str:
    return (f"Your answer does not match the required output schema: {problem}. "
            "Answer again with only a JSON value that matches the schema.")


# ---------------------------------------------------------------------------- a call


def test_a_model_tool_answers_with_the_models_structured_output(api, services, script):
    provider = scripted(services, script, {"output": {"category": "rent", "confidence": 0.9},
                                           "usage": {"input_tokens": 50, "output_tokens": 8}})
    action_id = publish(api, model_tool(temperature=0.1, maxOutputTokens=200))
    execution = invoke(api, action_id, {"memo": "March rent"})

    assert execution["status"] == "SUCCEEDED"
    assert execution["invocation"]["output"] == {"category": "rent", "confidence": 0.9}
    assert execution["invocation"]["usage"] == {"inputTokens": 50, "outputTokens": 8, "modelCalls": 1}
    [request] = provider.requests
    assert request.instructions == INSTRUCTIONS
    assert request.messages == (UserMessage('{"memo":"March rent"}'),)
    assert request.response_schema == OUTPUT_SCHEMA
    assert (request.model, request.temperature, request.max_output_tokens, request.tools) == ("test-model", 0.1, 200, ())


def test_its_model_request_is_recorded_as_a_model_call_child(api, services, script):
    scripted(services, script, {"output": {"category": "food", "confidence": 0.5},
                                "usage": {"input_tokens": 40, "output_tokens": 6}})
    execution = invoke(api, publish(api, model_tool()), {"memo": "lunch"})

    [child] = execution["children"]
    assert (child["actionId"], child["status"], child["callSequence"], child["depth"]) == (
        str(MODEL_CALL_ID), "SUCCEEDED", 1, 1)
    assert child["invocation"]["input"] == {
        "provider": "scripted", "model": "test-model", "toolChoice": "auto", "tools": [], "structuredOutput": True,
        "messages": [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": '{"memo":"lunch"}'}]}
    output = child["invocation"]["output"]
    assert (output["stopReason"], output["usage"], output["attempts"]) == (
        "stop", {"inputTokens": 40, "outputTokens": 6}, 1)
    assert output["messages"] == [{"role": "assistant", "content": '{"category":"food","confidence":0.5}'}]
    assert isinstance(output["latencyMs"], int)
    # And it is readable afterwards like any execution, with the invocation's usage.
    stored = api.gql("""query($id: UUID!) { actions { execution(id: $id) { invocation { usage }
      children { actionId invocation { output } } } } }""", {"id": execution["executionId"]})["actions"]["execution"]
    assert stored["invocation"]["usage"] == {"inputTokens": 40, "outputTokens": 6, "modelCalls": 1}
    assert stored["children"][0]["invocation"]["output"] == output


def test_an_invalid_answer_goes_back_to_the_model_once_and_the_corrected_one_is_the_output(api, services, script):
    provider = scripted(services, script, {"output": {"category": "travel", "confidence": 0.7}},
                        {"output": {"category": "other", "confidence": 0.7}})
    execution = invoke(api, publish(api, model_tool()), {"memo": "taxi"})

    assert execution["status"] == "SUCCEEDED"
    assert execution["invocation"]["output"] == {"category": "other", "confidence": 0.7}
    first, second = provider.requests
    problem = 'at /category: "travel" is not one of "rent", "food" or "other"'
    assert [m.__dict__ for m in second.messages] == [
        {"content": '{"memo":"taxi"}'},
        {"content": '{"category":"travel","confidence":0.7}', "tool_calls": ()},
        {"content": correction(problem)},
    ]
    assert second.instructions == first.instructions == INSTRUCTIONS
    # The second model_call records what was new: the correction (the wrong answer is the first's output).
    assert [c["invocation"]["input"]["messages"] for c in execution["children"]] == [
        [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": '{"memo":"taxi"}'}],
        [{"role": "user", "content": correction(problem)}]]
    assert execution["invocation"]["usage"]["modelCalls"] == 2


def test_an_answer_that_is_not_json_is_corrected_like_a_wrong_one(api, services, script):
    provider = scripted(services, script, {"text": "rent, I think"}, {"output": {"category": "rent", "confidence": 1}})
    execution = invoke(api, publish(api, model_tool()), {"memo": "rent"})
    assert execution["invocation"]["output"] == {"category": "rent", "confidence": 1}
    assert provider.requests[1].messages[-1].content == correction(
        "the answer is not JSON (Expecting value at position 0): 'rent, I think'")


def test_two_invalid_answers_fail_the_call_with_action_output_invalid(api, services, script):
    scripted(services, script, {"output": {"category": "travel", "confidence": 0.7}},
             {"output": {"category": "rent", "confidence": 7}})
    execution = invoke(api, publish(api, model_tool()), {"memo": "taxi"})

    assert execution["status"] == "FAILED"
    error = execution["invocation"]["error"]
    assert error["code"] == "action_output_invalid"
    assert error["message"] == ("the model's answer does not match the tool's outputSchema, after one correction: "
                                "at /confidence: 7 is greater than the maximum of 1")
    assert "model_call children" in error["hint"]
    # Both model calls are recorded (tokens were spent), under a call that left nothing else.
    assert [c["status"] for c in execution["children"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert execution["invocation"]["usage"]["modelCalls"] == 2


def test_a_program_calls_a_model_tool_like_any_tool(api, services, script):
    provider = scripted(services, script, {"output": {"category": "food", "confidence": 0.8}})
    classify = publish(api, model_tool())
    src = ('def run(event):\n'
           '    answer = tools.classify({"memo": event["data"]["memo"]})\n'
           '    return {"label": answer["category"]}\n')
    caller = publish(api, tool("label", src, tools=[{"name": "classify"}]))
    execution = invoke(api, caller, {"memo": "pizza"})

    assert execution["status"] == "SUCCEEDED", execution
    assert execution["invocation"]["output"] == {"label": "food"}
    [child] = execution["children"]
    assert (child["actionId"], child["invocation"]["output"]) == (classify, {"category": "food", "confidence": 0.8})
    assert provider.requests[0].messages == (UserMessage('{"memo":"pizza"}'),)


def test_start_action_runs_a_model_tool_on_a_worker(api, services, script, worker):  # noqa: F811
    scripted(services, script, {"output": {"category": "rent", "confidence": 0.6}})
    started = start(api, publish(api, model_tool()), {"memo": "rent"})
    done = wait_for(api, started["executionId"])
    assert (done["status"], done["invocation"]["output"]) == ("SUCCEEDED", {"category": "rent", "confidence": 0.6})


def test_an_mcp_server_lists_a_model_tool_and_calls_it_like_any_tool(api, services, script):
    from mcp_helpers import call_tool, create_server, list_tools, running_server

    scripted(services, script, {"output": {"category": "rent", "confidence": 0.95}})
    publish(api, model_tool())
    create_server(api, "desk", [{"name": "classify"}])
    with running_server(services) as url:
        [listed] = list_tools(f"{url}/mcp/desk", api.token)
        result = call_tool(f"{url}/mcp/desk", api.token, "classify", {"memo": "rent"})
    assert (listed.name, listed.input_schema, listed.output_schema) == ("classify", INPUT_SCHEMA, OUTPUT_SCHEMA)
    assert result.is_error is False
    assert result.structured_content == {"category": "rent", "confidence": 0.95}


# ---------------------------------------------------------------------------- the adapters' requests


def test_the_openai_adapter_asks_for_a_strict_json_schema_response_format(api, model_server):
    model_server.queue(200, {"id": "c1", "object": "chat.completion", "created": 1, "model": "test-model",
                             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                 "role": "assistant", "content": '{"category":"rent","confidence":0.9}'}}],
                             "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}})
    execution = invoke(api, publish(api, model_tool(provider="local", maxOutputTokens=100)), {"memo": "rent"})

    assert execution["invocation"]["output"] == {"category": "rent", "confidence": 0.9}
    assert execution["invocation"]["usage"] == {"inputTokens": 30, "outputTokens": 9, "modelCalls": 1}
    [seen] = model_server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.body == {
        "model": "test-model",
        "messages": [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": '{"memo":"rent"}'}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "output", "strict": True,
                                                                   "schema": OUTPUT_SCHEMA}},
        "max_tokens": 100,
    }


def test_the_anthropic_adapter_forces_a_tool_whose_input_is_the_answer(api, model_server):
    model_server.queue(200, {"id": "m1", "type": "message", "role": "assistant", "model": "test-model",
                             "content": [{"type": "tool_use", "id": "tu_1", "name": "final_answer",
                                          "input": {"category": "food", "confidence": 0.4}}],
                             "stop_reason": "tool_use", "stop_sequence": None,
                             "usage": {"input_tokens": 70, "output_tokens": 12}})
    execution = invoke(api, publish(api, model_tool(provider="claude")), {"memo": "bread"})

    assert execution["invocation"]["output"] == {"category": "food", "confidence": 0.4}
    [seen] = model_server.seen
    assert seen.path == "/v1/messages"
    assert seen.body == {
        "model": "test-model", "max_tokens": 4096, "system": INSTRUCTIONS,
        "messages": [{"role": "user", "content": '{"memo":"bread"}'}],
        "tools": [{"name": "final_answer", "description": "Give your final answer, in exactly this shape. Call it "
                                                          "once, when you are done.", "input_schema": OUTPUT_SCHEMA}],
        "tool_choice": {"type": "tool", "name": "final_answer"},
    }
    [child] = execution["children"]
    assert child["invocation"]["output"]["stopReason"] == "stop"


# ---------------------------------------------------------------------------- bad input


def test_a_bad_model_config_is_rejected_at_write_with_every_path(api):
    doc = model_tool()
    doc["config"] = {"model": {"provider": "", "name": 7, "temperature": 3, "maxOutputTokens": 0, "seed": 1},
                     "instructions": "x" * (64 * 1024 + 1), "extra": True}
    found = {p["path"]: p["message"] for p in problems(create_error(api, doc))}
    assert set(found) == {"config", "config.model", "config.model.provider", "config.model.name",
                          "config.model.temperature", "config.model.maxOutputTokens", "config.instructions"}
    assert found["config.instructions"] == "the instructions are 65537 bytes; the limit is 64 KiB"
    assert found["config.model"] == ("unknown field(s) seed; model takes provider, name, temperature, "
                                     "maxOutputTokens")
    assert found["config.model.temperature"] == "must be a number from 0 to 2"


def test_a_model_action_needs_its_config_and_both_schemas(api):
    doc = model_tool()
    del doc["config"]
    del doc["tool"]["outputSchema"]
    found = {p["path"]: p["message"] for p in problems(create_error(api, doc))}
    assert set(found) == {"config", "tool.outputSchema"}
    no_block = model_tool()
    del no_block["tool"]
    assert [p["path"] for p in problems(create_error(api, no_block))] == ["tool"]


def test_a_model_action_takes_no_tool_references_and_no_sessions(api):
    publish(api, tool("helper", 'def run(event):\n    return {}\n'))
    doc = model_tool()
    doc["tools"] = [{"name": "helper"}]
    doc["tool"]["session"] = True
    assert {p["path"] for p in problems(create_error(api, doc))} == {"tools", "tool.session"}


def test_a_model_action_is_stored_with_its_config(api):
    written = create(api, model_tool(temperature=0))
    assert (written["kind"], written["config"]) == ("model", {
        "model": {"provider": "scripted", "name": "test-model", "temperature": 0}, "instructions": INSTRUCTIONS})


def test_a_model_tools_output_schema_is_checked_for_model_clients(api):
    body = api.post("""mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) {
      version } } }""", {"id": str(uuid.uuid4()), "input": model_tool(output_schema={
        "type": "object", "properties": {"note": {"type": "string", "maxLength": 20}}, "required": ["note"]})}).json()
    assert [(w["path"], w["client"]) for w in body["extensions"]["warnings"]] == [
        ("tool.outputSchema.properties.note.maxLength", "openai")]


def test_an_unknown_provider_at_call_time_is_model_unavailable_naming_the_models_file(api, settings):
    execution = invoke(api, publish(api, model_tool(provider="nowhere")), {"memo": "rent"})
    assert execution["status"] == "FAILED"
    error = execution["invocation"]["error"]
    assert error["code"] == "model_unavailable"
    assert error["message"] == "the model provider 'nowhere' is not configured"
    assert str(settings.models_file.resolve()) in error["hint"]
    assert execution["children"] == []  # nothing was asked of any model
    assert execution["invocation"]["usage"] is None


def test_a_provider_closed_to_the_tenant_is_model_unavailable(api):
    error = invoke(api, publish(api, model_tool(provider="closed")), {"memo": "rent"})["invocation"]["error"]
    assert error["code"] == "model_unavailable"
    assert error["message"] == "the model provider 'closed' is not open to this tenant"
    assert "tenants list" in error["hint"]


def test_a_provider_that_fails_records_the_failed_model_call(api, services, script):
    scripted(services, script)  # a script with no responses: the provider answers model_unavailable
    execution = invoke(api, publish(api, model_tool()), {"memo": "rent"})
    assert execution["invocation"]["error"]["code"] == "model_unavailable"
    [child] = execution["children"]
    assert (child["actionId"], child["status"], child["invocation"]["error"]["code"]) == (
        str(MODEL_CALL_ID), "FAILED", "model_unavailable")


def test_model_call_cannot_be_invoked_directly(api):
    error = api.error(INVOKE, {"id": str(MODEL_CALL_ID), "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    assert error["extensions"]["code"] == "action_not_callable"
    assert "model tool or an agent" in error["extensions"]["hint"]



# ---------------------------------------------------------------------------- README "Model tools"


def readme_block(after: str) -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index("```toml\n", text.index(after)) + len("```toml\n")
    return text[start:text.index("```", start)]


def test_the_readme_model_tool_publishes_and_answers_through_the_openai_adapter(api, tmp_path, model_server):
    from mcp_helpers import _Querying

    from ledger.client.publish import publish as publish_files

    path = tmp_path / "classify_memo.toml"
    path.write_text(readme_block("The action, as `ledger publish` reads it:"))
    publish_files(_Querying(api), [path])
    model_server.queue(200, {"id": "c1", "object": "chat.completion", "created": 1, "model": "llama3.1",
                             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                 "role": "assistant", "content": '{"category":"rent"}'}}],
                             "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}})
    execution = invoke(api, "5c1e0f7a-2b3d-4e5f-8a9b-0c1d2e3f4a50", {"memo": "office rent, May"})
    assert (execution["status"], execution["invocation"]["output"]) == ("SUCCEEDED", {"category": "rent"})
    body = model_server.seen[0].body
    assert (body["model"], body["temperature"], body["messages"][0]["role"]) == ("llama3.1", 0, "system")
    assert body["response_format"]["json_schema"]["strict"] is True
