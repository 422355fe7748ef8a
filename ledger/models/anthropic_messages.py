"""The `anthropic` provider type: the Messages API through the official `anthropic` SDK, retries off.

Structured output is a forced tool, `final_answer`, whose input is the answer: alone (kind `model`, or
tool_choice "none") the model must call it; beside the agent's tools, tool_choice "auto" becomes "any",
so that the model either calls tools or gives its answer in the schema. The call of `final_answer`
comes back as the response's text (its input as JSON), never as a tool call."""

from __future__ import annotations

import json
from typing import Any

from . import sdk
from .base import HTTPProvider
from .types import (MAX_TOKENS, STOP, TOOL_CALLS, AssistantMessage, ForcedTool, ModelRequest, ModelResponse,
                    ToolCall, ToolResult, ToolSpec, Usage, UserMessage, as_json_text)

ANSWER_TOOL = "final_answer"
ANSWER_DESCRIPTION = "Give your final answer, in exactly this shape. Call it once, when you are done."
# The Messages API requires max_tokens.
DEFAULT_MAX_TOKENS = 4096
_STOP_REASONS = {"end_turn": STOP, "stop_sequence": STOP, "tool_use": TOOL_CALLS, "max_tokens": MAX_TOKENS}


class AnthropicProvider(HTTPProvider):
    type = "anthropic"
    default_base_url = "https://api.anthropic.com"

    def _new_client(self, api_key: str) -> Any:
        import anthropic

        return anthropic.Anthropic(api_key=api_key, base_url=self.base_url, max_retries=0)

    def _send(self, client: Any, body: dict, timeout: float) -> tuple[dict, int]:
        import anthropic

        create = client.messages.with_raw_response.create
        return sdk.call(anthropic, self.name, self._secrets,
                        lambda: create(**self.sdk_arguments(create, body), timeout=timeout))

    def wire_request(self, request: ModelRequest) -> dict:
        body: dict = {"model": request.model, "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS}
        if request.instructions:
            body["system"] = request.instructions
        body["messages"] = _messages(request)
        tools = list(request.tools)
        choice = request.tool_choice
        if request.response_schema is not None:
            if any(t.name == ANSWER_TOOL for t in tools):
                raise ValueError(f"a tool may not be named {ANSWER_TOOL!r} beside structured output")
            tools.append(ToolSpec(ANSWER_TOOL, ANSWER_DESCRIPTION, request.response_schema))
            if choice == "none" or not request.tools:
                choice = ForcedTool(ANSWER_TOOL)
            elif choice == "auto":
                choice = "required"
        if tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                             for t in tools]
            body["tool_choice"] = ({"type": "tool", "name": choice.name} if isinstance(choice, ForcedTool)
                                   else {"type": {"auto": "auto", "none": "none", "required": "any"}[choice]})
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    def parse_response(self, request: ModelRequest, answer: dict, latency_ms: int, attempts: int) -> ModelResponse:
        content = answer["content"]
        if not isinstance(content, list):
            raise TypeError("content is not a list of blocks")
        texts, calls = [], []
        structured = None
        for block in content:
            kind = block["type"]
            if kind == "text":
                texts.append(block["text"])
            elif kind == "tool_use":
                if not isinstance(block["input"], dict):
                    raise TypeError("a tool_use block's input is not an object")
                if request.response_schema is not None and block["name"] == ANSWER_TOOL:
                    structured = as_json_text(block["input"])
                else:
                    calls.append(ToolCall(id=str(block["id"]), name=str(block["name"]),
                                          arguments=as_json_text(block["input"])))
        reason = answer.get("stop_reason") or "end_turn"
        text = structured if structured is not None else "".join(texts)
        if structured is not None and not calls:
            reason = "end_turn"
        ignored: tuple[ToolCall, ...] = ()
        if request.tool_choice == "none" and calls:
            ignored, calls, reason = tuple(calls), [], "end_turn"
        usage = answer.get("usage") or {}
        input_tokens = sum(int(usage.get(k) or 0) for k in
                           ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        return ModelResponse(
            text=text, tool_calls=tuple(calls), stop_reason=_STOP_REASONS.get(reason, reason),
            usage=Usage(input_tokens, int(usage.get("output_tokens") or 0)), latency_ms=latency_ms,
            raw_new_messages=({"role": "assistant", "content": content},), attempts=attempts,
            ignored_tool_calls=ignored)


def _messages(request: ModelRequest) -> list[dict]:
    """The Messages API's alternating turns: tool results are blocks of the next user turn, and the
    user-side items in a row share one turn."""
    out: list[dict] = []
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            blocks: list[dict] = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                       for c in message.tool_calls]
            out.append({"role": "assistant", "content": blocks})
            continue
        if isinstance(message, UserMessage):
            block = {"type": "text", "text": message.content}
        elif isinstance(message, ToolResult):
            block = {"type": "tool_result", "tool_use_id": message.call_id, "content": message.content}
            if message.is_error:
                block["is_error"] = True
        else:
            raise TypeError(f"not a message: {message!r}")
        if out and out[-1]["role"] == "user":
            previous = out[-1]
            if isinstance(previous["content"], str):
                previous["content"] = [{"type": "text", "text": previous["content"]}]
            previous["content"].append(block)
        elif isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.content})
        else:
            out.append({"role": "user", "content": [block]})
    return out


def _input(arguments: str) -> dict:
    # A tool_use input must be an object; arguments the model wrote that are not one are kept whole.
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}
