"""The one interface between the ledger and a model: a neutral request and response that each provider
adapter converts to and from its wire format (DESIGN 13). Nothing here knows a provider's dialect."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, Union


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # The arguments as the model wrote them: text, not yet parsed, so that arguments that are not JSON
    # reach the agent loop (and go back to the model as an error result) instead of failing the call.
    arguments: str


@dataclass(frozen=True)
class UserMessage:
    content: str


@dataclass(frozen=True)
class AssistantMessage:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Union[UserMessage, AssistantMessage, ToolResult]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict


@dataclass(frozen=True)
class ForcedTool:
    """`tool_choice` that makes the model call this one tool."""

    name: str


# "auto": the model chooses; "none": it may not call tools (they stay declared); "required": it must
# call one; a ForcedTool: it must call that one.
ToolChoice = Union[str, ForcedTool]
TOOL_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ModelRequest:
    model: str
    messages: tuple[Message, ...]
    instructions: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    # Structured output (kind `model`, an agent's outputSchema): the answer's text is JSON of this shape.
    response_schema: dict | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    # Seconds for one attempt.
    timeout: float = 120.0
    # `time.monotonic()` past which no attempt starts and no attempt runs (the request's deadline).
    deadline: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool_choice, ForcedTool) and self.tool_choice not in TOOL_CHOICES:
            raise ValueError(f"tool_choice must be one of {TOOL_CHOICES} or a ForcedTool, not {self.tool_choice!r}")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


# Stop reasons, the same for every provider; a provider's reason we do not know is kept as it came.
STOP = "stop"
TOOL_CALLS = "tool_calls"
MAX_TOKENS = "max_tokens"


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str
    usage: Usage
    latency_ms: int
    # The assistant message as the provider sent it (its wire format), for the model_call record; never
    # headers.
    raw_new_messages: tuple[dict, ...] = ()
    # Attempts made (transient failures are retried inside one call, unseen by the model).
    attempts: int = 1
    # Tool calls the provider returned although the request said tool_choice "none": not to be run, but
    # recorded (DESIGN 13, the round cap).
    ignored_tool_calls: tuple[ToolCall, ...] = field(default=())


class ModelProvider(Protocol):
    name: str

    def complete(self, request: ModelRequest) -> ModelResponse: ...


def as_json_text(value: Any) -> str:
    """JSON as the adapters send and compare it: compact, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
