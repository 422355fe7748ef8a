"""The `scripted` provider type: a JSON file of model responses answered in order, for deterministic
tests of agents (DESIGN 13).

The file is `{"responses": [...], "loop": false}` (or just the list). A response is
`{"text"?: str, "output"?: any JSON (the text is its JSON, for structured output),
"tool_calls"?: [{"name": str, "arguments": object or str, "id"?: str}], "usage"?: {"input_tokens",
"output_tokens"}}`. Arguments given as a string are sent as they are (arguments that are not JSON can be
scripted); a call without an id gets `call_<response>_<call>`, both counted from 1.

- Each model call takes the next response, whatever it asks. Under tool_choice "none" the response's
  tool calls are not returned (they are reported as ignored, and recorded) and its text is the answer:
  a script stays one response per call, so what a test asserts about round N is response N.
- At the end of the script the call fails with `model_unavailable`, unless `loop` starts it over.
- The file is read again, from its first response, when it changes: a script can be edited between
  test runs without restarting the server.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from .failures import ModelUnavailable, ModelsConfigInvalid
from .types import MAX_TOKENS, STOP, TOOL_CALLS, ModelRequest, ModelResponse, ToolCall, Usage, as_json_text

_RESPONSE_KEYS = {"text", "output", "tool_calls", "usage", "stop_reason"}


class ScriptedProvider:
    type = "scripted"

    def __init__(self, name: str, script: Path):
        self.name = name
        self.script = script
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._responses: list[ModelResponse] = []
        self._loop = False
        self._next = 0
        # The requests answered (the latest ones), for tests to assert what the agent loop asked.
        self.requests: collections.deque[ModelRequest] = collections.deque(maxlen=256)
        self._reload()

    def _reload(self) -> None:
        stat = os.stat(self.script)
        self._responses, self._loop = parse_script(self.script)
        self._stamp, self._next = (stat.st_mtime_ns, stat.st_size), 0

    def reset(self) -> None:
        with self._lock:
            self._next = 0
            self.requests.clear()

    def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.monotonic()
        with self._lock:
            try:
                stat = os.stat(self.script)
                if (stat.st_mtime_ns, stat.st_size) != self._stamp:
                    self._reload()
            except (OSError, ModelsConfigInvalid) as exc:
                message = exc.message if isinstance(exc, ModelsConfigInvalid) else str(exc)
                raise ModelUnavailable(f"the scripted provider {self.name!r} cannot read its script: {message}",
                                       hint=f"fix the script {self.script}") from None
            if self._next >= len(self._responses):
                if not self._loop or not self._responses:
                    raise ModelUnavailable(
                        f"the scripted provider {self.name!r} has answered all {len(self._responses)} responses "
                        f"of its script",
                        hint=f'add responses to {self.script}, or set "loop": true in it; '
                             "the script starts over when its file changes")
                self._next = 0
            response = self._responses[self._next]
            self._next += 1
            self.requests.append(request)
        latency_ms = int((time.monotonic() - started) * 1000)
        if request.tool_choice == "none" and response.tool_calls:
            return ModelResponse(text=response.text, tool_calls=(), stop_reason=STOP, usage=response.usage,
                                 latency_ms=latency_ms, raw_new_messages=response.raw_new_messages,
                                 ignored_tool_calls=response.tool_calls)
        return ModelResponse(text=response.text, tool_calls=response.tool_calls,
                             stop_reason=response.stop_reason, usage=response.usage, latency_ms=latency_ms,
                             raw_new_messages=response.raw_new_messages)


def parse_script(path: Path) -> tuple[list[ModelResponse], bool]:
    def bad(where: str, message: str) -> ModelsConfigInvalid:
        return ModelsConfigInvalid(f"the script {path}{where} {message}",
                                   hint="see README \"Agents\" for the format of a scripted provider's script")

    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise bad("", f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise bad("", f"is not JSON: {exc}") from None
    loop = False
    if isinstance(document, dict):
        unknown = set(document) - {"responses", "loop"}
        if unknown:
            raise bad("", f"has unknown keys {sorted(unknown)} (it takes responses and loop)")
        loop = document.get("loop", False)
        if not isinstance(loop, bool):
            raise bad(" at loop", "must be true or false")
        document = document.get("responses")
    if not isinstance(document, list):
        raise bad("", "must be a list of responses, or {\"responses\": [...]}")
    responses = []
    for i, entry in enumerate(document):
        where = f" at responses[{i}]"
        if not isinstance(entry, dict):
            raise bad(where, "must be an object")
        unknown = set(entry) - _RESPONSE_KEYS
        if unknown:
            raise bad(where, f"has unknown keys {sorted(unknown)} (it takes {sorted(_RESPONSE_KEYS)})")
        if "text" in entry and "output" in entry:
            raise bad(where, "has both text and output (output is the text as JSON)")
        text = as_json_text(entry["output"]) if "output" in entry else entry.get("text", "")
        if not isinstance(text, str):
            raise bad(f"{where}.text", "must be a string")
        calls = []
        for j, call in enumerate(entry.get("tool_calls") or []):
            cwhere = f"{where}.tool_calls[{j}]"
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
                raise bad(cwhere, "must be {\"name\": str, \"arguments\": object or str, \"id\"?: str}")
            arguments = call["arguments"]
            calls.append(ToolCall(id=str(call.get("id") or f"call_{i + 1}_{j + 1}"), name=call["name"],
                                  arguments=arguments if isinstance(arguments, str) else as_json_text(arguments)))
        usage = entry.get("usage") or {}
        if not isinstance(usage, dict) or not all(isinstance(usage.get(k, 0), int) and usage.get(k, 0) >= 0
                                                  for k in ("input_tokens", "output_tokens")):
            raise bad(f"{where}.usage", "must be {\"input_tokens\": int >= 0, \"output_tokens\": int >= 0}")
        stop = entry.get("stop_reason") or (TOOL_CALLS if calls else STOP)
        if stop not in (STOP, TOOL_CALLS, MAX_TOKENS):
            raise bad(f"{where}.stop_reason", f"must be one of {[STOP, TOOL_CALLS, MAX_TOKENS]}")
        raw: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            raw["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        responses.append(ModelResponse(text=text, tool_calls=tuple(calls), stop_reason=stop,
                                       usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
                                       latency_ms=0, raw_new_messages=(raw,)))
    return responses, loop
