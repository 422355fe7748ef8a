"""The model provider layer (DESIGN 13, 16): the `openai` and `anthropic` adapters against a local server
speaking each API's documented wire format, the `scripted` provider, the models file, the retries and
the scrubbing of secrets."""

from __future__ import annotations

import json
import uuid

import pytest

from ledger.models import (AssistantMessage, ForcedTool, ModelRequest, ModelRequestRejected, ModelResponseInvalid,
                           ModelUnavailable, ModelsConfigInvalid, ToolCall, ToolResult, ToolSpec, Usage,
                           UserMessage, dialect_problems, load_models, restore_optional, scrub, to_gemini, to_openai)
from ledger.models.anthropic_messages import AnthropicProvider
from ledger.models.openai_chat import OpenAIProvider
from ledger.models.scripted import ScriptedProvider
from model_server import ModelServer

KEY = "sk-test-0123456789abcdefSECRET"

TRANSFER_SCHEMA = {
    "type": "object",
    "properties": {
        "from": {"type": "string"},
        "to": {"type": "string"},
        "amount": {"type": "string", "format": "decimal"},
        "memo": {"type": "string", "maxLength": 100},
    },
    "required": ["from", "to", "amount"],
}
TRANSFER_STRICT = {
    "type": "object",
    "properties": {
        "from": {"type": "string"},
        "to": {"type": "string"},
        "amount": {"type": "string"},
        "memo": {"type": ["string", "null"]},
    },
    "required": ["from", "to", "amount", "memo"],
    "additionalProperties": False,
}
BALANCE_SCHEMA = {"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}
TOOLS = (ToolSpec("transfer", "Move money between two accounts.", TRANSFER_SCHEMA),
         ToolSpec("get_balance", "The balance of an account.", BALANCE_SCHEMA))


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def openai_provider(server, sleeps=None, **kwargs) -> OpenAIProvider:
    return OpenAIProvider("local", base_url=server.url + "/v1", api_key=KEY, sleep=Sleeps() if sleeps is None else sleeps, **kwargs)


def anthropic_provider(server, sleeps=None) -> AnthropicProvider:
    return AnthropicProvider("claude", base_url=server.url, api_key=KEY, sleep=Sleeps() if sleeps is None else sleeps)


def chat_completion(message: dict, finish_reason: str, usage=(120, 30)) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def anthropic_message(content: list, stop_reason: str, usage=(100, 20)) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}


# A conversation one round in: the model called both tools, the results go back.
ROUND_TWO = (
    UserMessage('{"from":"A","to":"B","amount":"5.00"}'),
    AssistantMessage(None, (ToolCall("call_1", "get_balance", '{"account":"A"}'),
                            ToolCall("call_2", "transfer", '{"from":"A","to":"B","amount":"5.00"}'))),
    ToolResult("call_1", "get_balance", '{"balance":"10.00"}'),
    ToolResult("call_2", "transfer", "action_input_invalid: amount must be positive\nhint: send an amount above 0",
               is_error=True),
)


# ---------------------------------------------------------------------------------- openai

def test_openai_parses_two_tool_calls_and_usage_and_sends_tools_in_strict_mode(server):
    server.queue(200, chat_completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_balance", "arguments": '{"account":"A"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "transfer", "arguments": '{"from":"A","to":"B","amount":"5.00","memo":null}'}},
    ]}, "tool_calls"))
    response = openai_provider(server).complete(ModelRequest(
        model="gpt-test", instructions="You move money.", messages=(UserMessage("pay B 5"),), tools=TOOLS,
        temperature=0.2, max_output_tokens=500))

    assert response.tool_calls == (
        ToolCall("call_a", "get_balance", '{"account":"A"}'),
        # The null strict mode asked for the optional memo is gone again.
        ToolCall("call_b", "transfer", '{"from":"A","to":"B","amount":"5.00"}'),
    )
    assert (response.text, response.stop_reason, response.usage, response.attempts) == ("", "tool_calls", Usage(120, 30), 1)
    assert response.raw_new_messages[0]["tool_calls"][1]["function"]["arguments"].endswith('"memo":null}')
    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "You move money."}, {"role": "user", "content": "pay B 5"}],
        "tools": [
            {"type": "function", "function": {"name": "transfer", "description": "Move money between two accounts.",
                                              "parameters": TRANSFER_STRICT, "strict": True}},
            {"type": "function", "function": {"name": "get_balance", "description": "The balance of an account.",
                                              "parameters": {**BALANCE_SCHEMA, "additionalProperties": False},
                                              "strict": True}},
        ],
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_tokens": 500,
    }


def test_openai_sends_tool_results_back_with_tool_choice_none_and_ignores_tool_calls_then(server):
    server.queue(200, chat_completion({"role": "assistant", "content": "Paid.", "tool_calls": [
        {"id": "call_c", "type": "function", "function": {"name": "get_balance", "arguments": "{}"}}]}, "tool_calls"))
    response = openai_provider(server).complete(ModelRequest(
        model="gpt-test", messages=ROUND_TWO, tools=TOOLS[1:], tool_choice="none"))

    assert (response.text, response.tool_calls, response.stop_reason) == ("Paid.", (), "stop")
    assert response.ignored_tool_calls == (ToolCall("call_c", "get_balance", "{}"),)
    assert server.seen[0].body == {
        "model": "gpt-test",
        "messages": [
            {"role": "user", "content": '{"from":"A","to":"B","amount":"5.00"}'},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_balance", "arguments": '{"account":"A"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "transfer", "arguments": '{"from":"A","to":"B","amount":"5.00"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"balance":"10.00"}'},
            {"role": "tool", "tool_call_id": "call_2",
             "content": "action_input_invalid: amount must be positive\nhint: send an amount above 0"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_balance", "description": "The balance of an account.",
            "parameters": {**BALANCE_SCHEMA, "additionalProperties": False}, "strict": True}}],
        "tool_choice": "none",
    }


def test_openai_structured_output_is_a_json_schema_response_format_and_a_forced_tool_is_named(server):
    server.queue(200, chat_completion({"role": "assistant", "content": '{"category":"rent","note":null}'}, "stop"))
    schema = {"type": "object", "properties": {"category": {"type": "string", "enum": ["rent", "food"]},
                                               "note": {"type": "string"}}, "required": ["category"]}
    response = openai_provider(server).complete(ModelRequest(model="gpt-test", messages=(UserMessage("{}"),),
                                                             response_schema=schema))
    assert response.text == '{"category":"rent"}'
    assert server.seen[0].body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "strict": True, "schema": {
            "type": "object", "properties": {"category": {"type": "string", "enum": ["rent", "food"]},
                                             "note": {"type": ["string", "null"]}},
            "required": ["category", "note"], "additionalProperties": False}}}
    assert "tools" not in server.seen[0].body and "tool_choice" not in server.seen[0].body

    server.queue(200, chat_completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "transfer", "arguments": "{}"}}]}, "tool_calls"))
    openai_provider(server).complete(ModelRequest(model="gpt-test", messages=(UserMessage("x"),), tools=TOOLS,
                                                  tool_choice=ForcedTool("transfer")))
    assert server.seen[1].body["tool_choice"] == {"type": "function", "function": {"name": "transfer"}}


def test_openai_sends_a_schema_strict_mode_cannot_say_as_it_is_without_strict(server):
    server.queue(200, chat_completion({"role": "assistant", "content": "ok"}, "stop"))
    tags = {"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}}
    openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),),
                                                  tools=(ToolSpec("tag", "Tag.", tags),)))
    assert server.seen[0].body["tools"] == [{"type": "function", "function": {
        "name": "tag", "description": "Tag.", "parameters": tags}}]


def test_openai_429_then_success_is_retried_unseen(server):
    server.queue(429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}, {"retry-after": "1"})
    server.queue(200, chat_completion({"role": "assistant", "content": "done"}, "stop", usage=(7, 3)))
    sleeps = Sleeps()
    response = openai_provider(server, sleeps).complete(ModelRequest(model="m", messages=(UserMessage("x"),)))
    assert (response.text, response.usage, response.attempts) == ("done", Usage(7, 3), 2)
    assert len(server.seen) == 2 and server.seen[0].body == server.seen[1].body
    assert sleeps == [1.0]  # the server's Retry-After, under the cap


def test_openai_three_500s_are_model_unavailable_without_the_key_the_body_echoes(server, caplog):
    for _ in range(3):
        server.queue(500, {"error": {"message": f"internal error for key {KEY} (Authorization: Bearer {KEY})",
                                     "type": "server_error"}})
    sleeps = Sleeps()
    with pytest.raises(ModelUnavailable) as failure:
        openai_provider(server, sleeps).complete(ModelRequest(model="m", messages=(UserMessage("x"),)))
    assert len(server.seen) == 3
    assert len(sleeps) == 2 and all(0 < s <= 4.0 for s in sleeps)
    message = failure.value.message
    assert "failed 3 times" in message and "HTTP 500" in message and "internal error for key" in message
    assert KEY not in message and KEY[:8] not in message and "0123456789" not in message
    assert failure.value.code == "model_unavailable" and failure.value.hint
    retries = [r.getMessage() for r in caplog.records if r.name == "ledger.models"]
    assert len(retries) == 2 and "attempt 1 of 3 failed" in retries[0]
    assert all(KEY not in r and "0123456789" not in r for r in retries)


def test_openai_timeouts_are_retried_then_model_unavailable(server):
    for _ in range(3):
        server.queue(200, chat_completion({"role": "assistant", "content": "late"}, "stop"), delay=1.0)
    with pytest.raises(ModelUnavailable, match="timed out"):
        openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),), timeout=0.2))
    assert len(server.seen) == 3


def test_openai_400_is_model_request_rejected_at_once(server):
    server.queue(400, {"error": {"message": "The model `nope` does not exist", "type": "invalid_request_error"}})
    with pytest.raises(ModelRequestRejected, match="does not exist") as failure:
        openai_provider(server).complete(ModelRequest(model="nope", messages=(UserMessage("x"),)))
    assert failure.value.code == "model_request_rejected" and len(server.seen) == 1


def test_openai_401_is_model_unavailable_at_once_naming_api_key_env(server):
    server.queue(401, {"error": {"message": f"Incorrect API key provided: {KEY[:6]}****{KEY[-4:]}"}})
    with pytest.raises(ModelUnavailable, match="refused its credentials") as failure:
        openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),)))
    assert "api_key_env" in failure.value.hint and len(server.seen) == 1
    assert KEY[:6] not in failure.value.message


def test_openai_garbage_answer_is_model_response_invalid(server):
    server.queue(200, "<html>gateway says hi</html>")
    with pytest.raises(ModelResponseInvalid, match="not JSON"):
        openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),)))
    server.queue(200, {"choices": []})
    with pytest.raises(ModelResponseInvalid, match="does not document"):
        openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),)))


def test_a_wait_that_would_outlast_the_deadline_is_action_response_timeout(server):
    import time

    from ledger.models import ModelDeadline

    server.queue(429, {"error": {"message": "busy"}}, {"retry-after": "3"})
    sleeps = Sleeps()
    with pytest.raises(ModelDeadline, match="after 1 attempt") as failure:
        openai_provider(server, sleeps).complete(ModelRequest(model="m", messages=(UserMessage("x"),),
                                                              deadline=time.monotonic() + 1.0))
    assert failure.value.code == "action_response_timeout" and "Request-Timeout" in failure.value.hint
    assert (len(server.seen), sleeps) == (1, [])
    with pytest.raises(ModelDeadline):
        openai_provider(server).complete(ModelRequest(model="m", messages=(UserMessage("x"),),
                                                      deadline=time.monotonic() - 1))
    assert len(server.seen) == 1  # a passed deadline sends nothing


# ---------------------------------------------------------------------------------- anthropic

def test_anthropic_parses_two_tool_calls_and_usage_and_sends_tools(server):
    server.queue(200, anthropic_message([
        {"type": "text", "text": "Checking first."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_balance", "input": {"account": "A"}},
        {"type": "tool_use", "id": "toolu_2", "name": "transfer", "input": {"from": "A", "to": "B", "amount": "5.00"}},
    ], "tool_use", usage=(100, 20)))
    response = anthropic_provider(server).complete(ModelRequest(
        model="claude-test", instructions="You move money.", messages=(UserMessage("pay B 5"),), tools=TOOLS,
        temperature=0.0))

    assert response.tool_calls == (ToolCall("toolu_1", "get_balance", '{"account":"A"}'),
                                   ToolCall("toolu_2", "transfer", '{"from":"A","to":"B","amount":"5.00"}'))
    assert (response.text, response.stop_reason, response.usage) == ("Checking first.", "tool_calls", Usage(100, 20))
    [seen] = server.seen
    assert seen.path == "/v1/messages"
    # The SDK sends the key as x-api-key (1.x) or as a bearer token (2.x).
    assert KEY in (seen.headers.get("x-api-key"), seen.headers.get("authorization", "").removeprefix("Bearer "))
    assert seen.body == {
        "model": "claude-test", "max_tokens": 4096, "system": "You move money.",
        "messages": [{"role": "user", "content": "pay B 5"}],
        "tools": [{"name": "transfer", "description": "Move money between two accounts.", "input_schema": TRANSFER_SCHEMA},
                  {"name": "get_balance", "description": "The balance of an account.", "input_schema": BALANCE_SCHEMA}],
        "tool_choice": {"type": "auto"},
        "temperature": 0.0,
    }


def test_anthropic_sends_tool_results_in_one_user_turn_with_tool_choice_none(server):
    server.queue(200, anthropic_message([{"type": "text", "text": "Paid."}], "end_turn"))
    response = anthropic_provider(server).complete(ModelRequest(
        model="claude-test", messages=ROUND_TWO, tools=TOOLS[1:], tool_choice="none", max_output_tokens=256))
    assert (response.text, response.tool_calls, response.stop_reason) == ("Paid.", (), "stop")
    assert server.seen[0].body == {
        "model": "claude-test", "max_tokens": 256,
        "messages": [
            {"role": "user", "content": '{"from":"A","to":"B","amount":"5.00"}'},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_balance", "input": {"account": "A"}},
                {"type": "tool_use", "id": "call_2", "name": "transfer",
                 "input": {"from": "A", "to": "B", "amount": "5.00"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": '{"balance":"10.00"}'},
                {"type": "tool_result", "tool_use_id": "call_2", "is_error": True,
                 "content": "action_input_invalid: amount must be positive\nhint: send an amount above 0"}]},
        ],
        "tools": [{"name": "get_balance", "description": "The balance of an account.", "input_schema": BALANCE_SCHEMA}],
        "tool_choice": {"type": "none"},
    }


def test_anthropic_structured_output_is_a_forced_tool_whose_input_is_the_text(server):
    schema = {"type": "object", "properties": {"category": {"type": "string"}}, "required": ["category"]}
    server.queue(200, anthropic_message([{"type": "tool_use", "id": "toolu_9", "name": "final_answer",
                                          "input": {"category": "rent"}}], "tool_use"))
    response = anthropic_provider(server).complete(ModelRequest(model="claude-test", messages=(UserMessage("{}"),),
                                                                response_schema=schema))
    assert (response.text, response.tool_calls, response.stop_reason) == ('{"category":"rent"}', (), "stop")
    body = server.seen[0].body
    assert body["tools"] == [{"name": "final_answer", "input_schema": schema,
                              "description": "Give your final answer, in exactly this shape. Call it once, when you are done."}]
    assert body["tool_choice"] == {"type": "tool", "name": "final_answer"}

    # Beside the agent's tools, the model must call one of them or give the answer.
    server.queue(200, anthropic_message([{"type": "text", "text": "x"}], "end_turn"))
    anthropic_provider(server).complete(ModelRequest(model="claude-test", messages=(UserMessage("{}"),), tools=TOOLS,
                                                     response_schema=schema))
    assert server.seen[1].body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in server.seen[1].body["tools"]] == ["transfer", "get_balance", "final_answer"]


def test_anthropic_429_then_success_is_retried_unseen(server):
    server.queue(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    server.queue(200, anthropic_message([{"type": "text", "text": "done"}], "end_turn", usage=(9, 2)))
    sleeps = Sleeps()
    response = anthropic_provider(server, sleeps).complete(ModelRequest(model="c", messages=(UserMessage("x"),)))
    assert (response.text, response.usage, response.attempts, len(server.seen), len(sleeps)) == ("done", Usage(9, 2), 2, 2, 1)


def test_anthropic_three_500s_are_model_unavailable_without_the_key(server):
    for status in (500, 529, 503):
        server.queue(status, {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": f"overloaded; x-api-key: {KEY}"}})
    with pytest.raises(ModelUnavailable) as failure:
        anthropic_provider(server).complete(ModelRequest(model="c", messages=(UserMessage("x"),)))
    assert len(server.seen) == 3
    assert "HTTP 503" in failure.value.message and "overloaded" in failure.value.message
    assert KEY not in failure.value.message and "0123456789" not in failure.value.message


# ---------------------------------------------------------------------------------- scripted

def write_script(tmp_path, document) -> ScriptedProvider:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(document))
    return ScriptedProvider("test", path)


def test_scripted_answers_in_order_with_tool_calls(tmp_path):
    provider = write_script(tmp_path, {"responses": [
        {"tool_calls": [{"name": "get_balance", "arguments": {"account": "A"}},
                        {"name": "transfer", "arguments": "not json", "id": "mine"}],
         "usage": {"input_tokens": 50, "output_tokens": 10}},
        {"text": "Done."},
    ]})
    request = ModelRequest(model="any", messages=(UserMessage("x"),), tools=TOOLS)
    first, second = provider.complete(request), provider.complete(request)
    assert first.tool_calls == (ToolCall("call_1_1", "get_balance", '{"account":"A"}'),
                                ToolCall("mine", "transfer", "not json"))
    assert (first.stop_reason, first.usage) == ("tool_calls", Usage(50, 10))
    assert (second.text, second.tool_calls, second.stop_reason, second.usage) == ("Done.", (), "stop", Usage(0, 0))
    with pytest.raises(ModelUnavailable, match="answered all 2 responses"):
        provider.complete(request)
    assert list(provider.requests) == [request, request]


def test_scripted_under_tool_choice_none_answers_the_text_and_ignores_the_calls(tmp_path):
    provider = write_script(tmp_path, {"loop": True, "responses": [
        {"text": "Stopping here.", "tool_calls": [{"name": "get_balance", "arguments": {}}]}]})
    calls = provider.complete(ModelRequest(model="m", messages=(UserMessage("x"),), tools=TOOLS))
    final = provider.complete(ModelRequest(model="m", messages=(UserMessage("x"),), tools=TOOLS, tool_choice="none"))
    assert len(calls.tool_calls) == 1
    assert (final.text, final.tool_calls, final.stop_reason) == ("Stopping here.", (), "stop")
    assert final.ignored_tool_calls == (ToolCall("call_1_1", "get_balance", "{}"),)


def test_scripted_output_is_structured_text_and_a_changed_file_starts_over(tmp_path):
    provider = write_script(tmp_path, [{"output": {"category": "rent"}}])
    request = ModelRequest(model="m", messages=(UserMessage("x"),))
    assert provider.complete(request).text == '{"category":"rent"}'
    (tmp_path / "script.json").write_text(json.dumps([{"text": "edited"}, {"text": "second"}]))
    assert provider.complete(request).text == "edited"


@pytest.mark.parametrize("document, where", [
    ([{"txt": "typo"}], "responses[0] has unknown keys ['txt']"),
    ([{"tool_calls": [{"name": "t"}]}], "responses[0].tool_calls[0]"),
    ({"responses": [], "loop": "yes"}, "at loop"),
])
def test_scripted_rejects_an_invalid_script_naming_where(tmp_path, document, where):
    with pytest.raises(ModelsConfigInvalid, match=__import__("re").escape(where)):
        write_script(tmp_path, document)


# ---------------------------------------------------------------------------------- the models file

def models_file(tmp_path, text: str):
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def test_models_file_loads_each_type_and_restricts_tenants(tmp_path):
    (tmp_path / "agent.json").write_text('[{"text": "hi"}]')
    tenant, other = uuid.uuid4(), uuid.uuid4()
    path = models_file(tmp_path, f'''
[local]
type = "openai"
base_url = "http://localhost:11434/v1"

[claude]
type = "anthropic"
api_key_env = "TEST_ANTHROPIC_KEY"
tenants = ["{tenant}"]

[test]
type = "scripted"
script = "agent.json"
''')
    models = load_models(path, environ={"TEST_ANTHROPIC_KEY": KEY})
    assert isinstance(models.for_tenant("local", other), OpenAIProvider)
    assert models.for_tenant("local", other).base_url == "http://localhost:11434/v1"
    assert isinstance(models.for_tenant("claude", tenant), AnthropicProvider)
    assert models.for_tenant("test", other).complete(ModelRequest(model="m", messages=(UserMessage("x"),))).text == "hi"
    with pytest.raises(ModelUnavailable, match="'claude' is not open to this tenant") as denied:
        models.for_tenant("claude", other)
    assert str(path) in denied.value.hint
    with pytest.raises(ModelUnavailable, match="'gpt' is not configured") as unknown:
        models.for_tenant("gpt", tenant)
    assert str(path) in unknown.value.hint


def test_without_a_models_file_every_provider_is_unavailable_with_a_hint():
    with pytest.raises(ModelUnavailable) as failure:
        load_models(None).for_tenant("local", uuid.uuid4())
    assert "LEDGER_MODELS" in failure.value.hint


@pytest.mark.parametrize("text, where", [
    ('[a]\ntype = "gemini"\n', "at a.type: must be one of openai, anthropic, scripted, not 'gemini'"),
    ('[a]\ntype = "scripted"\n', "at a.script: is missing"),
    ('[a]\ntype = "scripted"\nscript = "missing.json"\n', "at a.script: names"),
    ('[a]\ntype = "openai"\nbase-url = "http://x"\n', "at a.base-url: is not a key of a openai provider"),
    ('[a]\ntype = "openai"\napi_key_env = "NOT_SET_ANYWHERE"\n', "at a.api_key_env: names the environment variable NOT_SET_ANYWHERE"),
    ('[a]\ntype = "openai"\ntenants = ["x"]\n', "at a.tenants[0]: 'x' is not a tenant id"),
    ('[a]\ntype = "anthropic"\nbase_url = "localhost:1"\n', "at a.base_url: must be an http:// or https:// URL"),
    ("not toml [", "is not TOML"),
])
def test_an_invalid_models_file_names_the_file_and_key(tmp_path, text, where):
    path = models_file(tmp_path, text)
    with pytest.raises(ModelsConfigInvalid) as failure:
        load_models(path, environ={})
    assert str(path) in failure.value.message and where in failure.value.message
    assert failure.value.code == "models_config_invalid" and failure.value.hint


def test_serve_and_worker_stop_at_startup_on_an_invalid_models_file(tmp_path, capsys):
    from ledger.cli import main

    path = models_file(tmp_path, '[a]\ntype = "gemini"\n')
    for command in ("serve", "worker"):
        assert main([command, "--data-dir", str(tmp_path / "data"), "--models", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"error: the models file {path} at a.type" in err and "hint:" in err
    assert not (tmp_path / "data").exists()  # nothing was started


# ---------------------------------------------------------------------------------- scrub, dialects

def test_scrub_removes_known_secrets_their_masked_echoes_and_credential_headers():
    text = (f"key {KEY}; masked {KEY[:8]}****{KEY[-8:]}; Authorization: Bearer abc.def-123456; "
            "x-api-key: other-secret-value; api_key=zzzz9999; sk-proj-ABCDEFGHIJKL")
    out = scrub(text, [KEY])
    for leaked in (KEY, KEY[:8], KEY[-8:], "abc.def-123456", "other-secret-value", "zzzz9999", "sk-proj-ABCDEFGHIJKL"):
        assert leaked not in out
    assert out.startswith("key [redacted]; masked ")


def strict(schema: dict):
    conversion = to_openai(schema)
    return conversion.schema, conversion.strict, [(c.pointer, c.message) for c in conversion.changes]


def test_openai_strict_keeps_what_a_schema_accepts_and_reports_what_it_drops():
    assert strict(TRANSFER_SCHEMA) == (TRANSFER_STRICT, True, [
        ("/properties/amount/format", "OpenAI strict mode does not support the format 'decimal' (only date-time, "
         "time, date, duration, email, hostname, ipv4, ipv6, uuid); its adapter drops it, so the model is not told "
         "this rule (the ledger still enforces it)"),
        ("/properties/memo/maxLength", "OpenAI strict mode does not support `maxLength`; its adapter drops it, so "
         "the model is not told this rule (the ledger still enforces it)")])
    nested = {"type": "object", "properties": {"legs": {"type": "array", "items": {
        "type": "object", "properties": {"kind": {"enum": ["debit", "credit"]}, "n": {"$ref": "#/$defs/n"}},
        "required": ["n"]}}}, "$defs": {"n": {"type": "integer", "minimum": 0}}}
    assert strict(nested) == ({
        "type": "object",
        "properties": {"legs": {"type": ["array", "null"], "items": {
            "type": "object",
            "properties": {"kind": {"anyOf": [{"enum": ["debit", "credit"]}, {"type": "null"}]},
                           "n": {"$ref": "#/$defs/n"}},
            "required": ["kind", "n"], "additionalProperties": False}}},
        "$defs": {"n": {"type": "integer", "minimum": 0}},
        "required": ["legs"], "additionalProperties": False}, True, [])


def test_what_openai_strict_mode_cannot_say_sends_the_schema_as_it_is_with_each_reason():
    schema = {"type": "object", "properties": {
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "either": {"allOf": [{"type": "string"}]}, "memo": {"type": "string", "maxLength": 9}}}
    suffix = ("; so its adapter sends this schema without strict mode: the model sees it whole but is not held to "
              "it (the ledger still enforces it)")
    # The maxLength is not dropped (nothing is), so it is not reported.
    assert strict(schema) == (schema, False, [
        ("/properties/tags/additionalProperties", "OpenAI strict mode cannot say an object with keys of its choosing "
         "(additionalProperties); list the keys it may use" + suffix),
        ("/properties/either/allOf", "OpenAI strict mode does not support `allOf`" + suffix),
    ])


def test_restore_optional_removes_only_the_nulls_strict_mode_asked_for():
    schema = {"type": "object", "properties": {"memo": {"type": "string"}, "ref": {"type": ["string", "null"]},
                                               "legs": {"type": "array", "items": {"type": "object", "properties": {
                                                   "note": {"type": "string"}}}}}, "required": []}
    assert restore_optional({"memo": None, "ref": None, "legs": [{"note": None}, {"note": "x"}]}, schema) == \
        {"ref": None, "legs": [{}, {"note": "x"}]}


def test_gemini_inlines_what_it_can_and_reports_each_change_where_it_is_written():
    recursive = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}, "one": {"const": 1},
                                                  "either": {"type": ["string", "integer"]},
                                                  "maybe": {"type": ["string", "null"], "const": "x"},
                                                  "money": {"$ref": "#/$defs/money"}},
                 "required": ["tree", "one", "either", "maybe", "money"],
                 "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}},
                                    "required": ["child"]},
                           "money": {"type": "integer", "minimum": 1}}}
    conversion = to_gemini(recursive)
    assert conversion.schema == {
        "type": "object", "required": ["tree", "one", "either", "maybe", "money"],
        "properties": {"tree": {"type": "object", "properties": {"child": {"type": "object"}}, "required": ["child"]},
                       "one": {}, "either": {},
                       "maybe": {"type": "string", "nullable": True, "enum": ["x"]},
                       "money": {"type": "integer", "minimum": 1}}}
    # The recursion is reported in the definition, where the writer changes it, not where it is used.
    assert [c.pointer for c in conversion.changes] == ["/$defs/node/properties/child/$ref", "/properties/one/const",
                                                       "/properties/either/type"]
    assert "recursive" in conversion.changes[0].message
    assert dialect_problems({"type": "array", "items": {"type": "string"}})[0] == {
        "client": "mcp", "path": "/", "message": "the input schema's root must be an object (type: object)"}
    assert [p for p in dialect_problems(TRANSFER_SCHEMA) if p["client"] != "openai"] == []


def test_open_services_carries_the_providers_of_the_models_file(settings, db_url, tmp_path):
    from ledger.wiring import open_services

    (tmp_path / "agent.json").write_text('[{"text": "from the script"}]')
    settings.models_file = models_file(tmp_path, '[test]\ntype = "scripted"\nscript = "agent.json"\n')
    services = open_services(settings, db_url)
    try:
        provider = services.models.for_tenant("test", uuid.uuid4())
        assert provider.complete(ModelRequest(model="m", messages=(UserMessage("x"),))).text == "from the script"
    finally:
        services.close()


def test_a_refused_connection_is_retried_then_model_unavailable():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    provider = OpenAIProvider("local", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, sleep=sleeps)
    with pytest.raises(ModelUnavailable, match="could not connect"):
        provider.complete(ModelRequest(model="m", messages=(UserMessage("x"),)))
    assert len(sleeps) == 2


def test_openai_with_strict_false_sends_schemas_as_they_are(server):
    server.queue(200, chat_completion({"role": "assistant", "content": "ok"}, "stop"))
    openai_provider(server, strict=False).complete(ModelRequest(model="m", messages=(UserMessage("x"),), tools=TOOLS[:1]))
    assert server.seen[0].body["tools"] == [{"type": "function", "function": {
        "name": "transfer", "description": "Move money between two accounts.", "parameters": TRANSFER_SCHEMA}}]
