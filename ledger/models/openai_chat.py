"""The `openai` provider type: the Chat Completions wire format through the official `openai` SDK, with
its own retries off. Through `base_url` it also reaches Ollama, vLLM, llama.cpp's server, LM Studio and
OpenRouter, which speak the same format."""

from __future__ import annotations

import json
from typing import Any

from . import sdk
from .base import HTTPProvider
from .dialects import restore_optional, to_openai
from .types import (MAX_TOKENS, STOP, TOOL_CALLS, AssistantMessage, ForcedTool, ModelRequest, ModelResponse,
                    ToolCall, ToolResult, Usage, UserMessage)

_STOP_REASONS = {"stop": STOP, "tool_calls": TOOL_CALLS, "function_call": TOOL_CALLS, "length": MAX_TOKENS}


class OpenAIProvider(HTTPProvider):
    type = "openai"
    default_base_url = "https://api.openai.com/v1"

    def __init__(self, name: str, *, strict: bool = True, **kwargs: Any):
        super().__init__(name, **kwargs)
        # Strict mode (schemas the model's output is held to) where a schema converts; a server that does
        # not know it may be configured with strict = false.
        self.strict = strict

    def _new_client(self, api_key: str) -> Any:
        import openai

        return openai.OpenAI(api_key=api_key, base_url=self.base_url, max_retries=0, organization=None,
                             project=None)

    def _send(self, client: Any, body: dict, timeout: float) -> tuple[dict, int]:
        import openai

        create = client.chat.completions.with_raw_response.create
        return sdk.call(openai, self.name, self._secrets,
                        lambda: create(**self.sdk_arguments(create, body), timeout=timeout))

    def _schema(self, schema: dict) -> tuple[dict, bool]:
        """(what is sent, strict); what the conversion changes is what a write warned about."""
        if not self.strict:
            return schema, False
        conversion = to_openai(schema)
        return conversion.schema, conversion.strict

    def wire_request(self, request: ModelRequest) -> dict:
        messages: list[dict] = []
        if request.instructions:
            messages.append({"role": "system", "content": request.instructions})
        for message in request.messages:
            if isinstance(message, UserMessage):
                messages.append({"role": "user", "content": message.content})
            elif isinstance(message, AssistantMessage):
                wire: dict = {"role": "assistant", "content": message.content}
                if message.tool_calls:
                    wire["tool_calls"] = [{"id": c.id, "type": "function",
                                           "function": {"name": c.name, "arguments": c.arguments}}
                                          for c in message.tool_calls]
                messages.append(wire)
            elif isinstance(message, ToolResult):
                messages.append({"role": "tool", "tool_call_id": message.call_id, "content": message.content})
        body: dict = {"model": request.model, "messages": messages}
        if request.tools:
            tools = []
            for tool in request.tools:
                parameters, strict = self._schema(tool.input_schema)
                function = {"name": tool.name, "description": tool.description, "parameters": parameters}
                if strict:
                    function["strict"] = True
                tools.append({"type": "function", "function": function})
            body["tools"] = tools
            choice = request.tool_choice
            body["tool_choice"] = ({"type": "function", "function": {"name": choice.name}}
                                   if isinstance(choice, ForcedTool) else choice)
        if request.response_schema is not None:
            schema, strict = self._schema(request.response_schema)
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": schema, "strict": strict}}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            # `max_tokens`, not `max_completion_tokens`: every compatible server takes it.
            body["max_tokens"] = request.max_output_tokens
        return body

    def parse_response(self, request: ModelRequest, answer: dict, latency_ms: int, attempts: int) -> ModelResponse:
        choice = answer["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("choices[0].message is not an object")
        schemas = {t.name: t.input_schema for t in request.tools}
        calls = []
        for wire in message.get("tool_calls") or ():
            function = wire["function"]
            name, arguments = function["name"], function.get("arguments") or ""
            if not isinstance(name, str) or not isinstance(arguments, str):
                raise TypeError("a tool call's function name and arguments must be strings")
            calls.append(ToolCall(id=str(wire["id"]), name=name,
                                  arguments=self._restored(arguments, schemas.get(name))))
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise TypeError("choices[0].message.content is not a string")
        if request.response_schema is not None and text:
            text = self._restored(text, request.response_schema)
        usage = answer.get("usage") or {}
        reason = choice.get("finish_reason") or STOP
        ignored: tuple[ToolCall, ...] = ()
        if request.tool_choice == "none" and calls:
            ignored, calls, reason = tuple(calls), [], STOP
        return ModelResponse(
            text=text, tool_calls=tuple(calls), stop_reason=_STOP_REASONS.get(reason, reason),
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            latency_ms=latency_ms, raw_new_messages=(message,), attempts=attempts, ignored_tool_calls=ignored)

    def _restored(self, text: str, schema: dict | None) -> str:
        """The model's JSON without the nulls strict mode asked of it for optional properties."""
        if schema is None or not self._schema(schema)[1]:
            return text
        try:
            value = json.loads(text)
        except ValueError:
            return text  # not JSON: the agent loop reports it to the model as it came
        return json.dumps(restore_optional(value, schema), ensure_ascii=False, separators=(",", ":"))
