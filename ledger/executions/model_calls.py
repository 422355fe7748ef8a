"""One model request as a child execution of the native `model_call` (DESIGN 13).

Whoever asks a model inside a call tree (an agent's turn, a model tool) goes through `call_model`: the
request is counted toward the tree's 1,024 calls, the tree is marked as having called a model (so that
the server never runs the request or attempt again), and the call is recorded with the provider, the
model, the stop reason, the usage, the latency, and the messages that are new since the previous call
of the same turn: the request's and the response's, never headers.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..actions import natives
from ..errors import LedgerError
from ..models import AssistantMessage, Message, ModelRequest, ModelResponse, ToolCall, ToolResult, UserMessage
from ..scope import Scope
from . import admission
from .failures import CallFailed
from .records import PendingExecution
from .tree import CallTree, now


def call_model(scope: Scope, tree: CallTree, parent: PendingExecution, provider_name: str, request: ModelRequest,
               *, sequence: int, new_messages: Sequence[Message] | None = None,
               system: str | None = None) -> ModelResponse:
    """The provider's answer to `request`, made as call number `sequence` of `parent`'s attempt.

    `new_messages`: the request's messages not recorded by an earlier call of the turn (default: all);
    `system`: the instructions, recorded as a system message (the first call of a turn sends them).
    A failure (the provider unavailable, refusing, answering garbage, the deadline) is recorded and
    raised as the `CallFailed` that fails `parent`.
    """
    try:
        admission.count_call(tree)
    except admission.CallRefused as refused:
        raise CallFailed(refused.code, refused.message, refused.hint) from None
    recorded = [] if system is None else [{"role": "system", "content": system}]
    recorded += [message_json(m) for m in (request.messages if new_messages is None else new_messages)]
    input = {"provider": provider_name, "model": request.model, "toolChoice": _choice(request.tool_choice),
             "tools": [t.name for t in request.tools], "structuredOutput": request.response_schema is not None,
             "messages": recorded}
    child_id = scope.services.execution_ids.child(parent.execution_id, parent.attempt, sequence)
    child = PendingExecution(
        execution_id=child_id, action_id=natives.MODEL_CALL_ID, action_version=1, status="RUNNING",
        parent_execution_id=parent.execution_id, root_execution_id=parent.root_execution_id,
        call_sequence=sequence, depth=parent.depth + 1, client_id=scope.principal.client_id,
        event={"eventType": "action.invoked", "data": input, "recordType": None, "recordId": None},
        input=input, started_at=now(), action_name="model_call", action_kind="model_call",
        parent_attempt=parent.attempt,
    )
    tree.pending.append(child)
    started = time.monotonic()
    reached = False
    try:
        provider = scope.services.models.for_tenant(provider_name, scope.tenant_id)
        # From here on tokens may be spent, whatever the outcome.
        tree.mark_model_called()
        reached = True
        try:
            response = provider.complete(request)
        except ValueError as exc:  # a request the adapter cannot say in its wire format
            raise LedgerError(f"the model provider {provider_name!r} cannot take this request: {exc}",
                              code="model_request_rejected", hint="rename the tool or change the agent's config") from None
    except LedgerError as failed:
        child.status, child.finished_at = "FAILED", now()
        child.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
        child.output = {"latencyMs": int((time.monotonic() - started) * 1000)} if reached else None
        raise CallFailed(failed.code, failed.message, failed.hint) from None
    child.status, child.finished_at = "SUCCEEDED", now()
    child.output = {
        "stopReason": response.stop_reason,
        "usage": {"inputTokens": response.usage.input_tokens, "outputTokens": response.usage.output_tokens},
        "latencyMs": response.latency_ms, "attempts": response.attempts,
        "messages": [dict(m) for m in response.raw_new_messages],
        "ignoredToolCalls": [_call_json(c) for c in response.ignored_tool_calls],
    }
    return response


def message_json(message: Message) -> dict[str, Any]:
    """A message of the neutral request, as the model_call record shows it."""
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, AssistantMessage):
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["toolCalls"] = [_call_json(c) for c in message.tool_calls]
        return out
    if isinstance(message, ToolResult):
        return {"role": "tool", "toolCallId": message.call_id, "name": message.name, "content": message.content,
                "isError": message.is_error}
    raise TypeError(f"not a message: {message!r}")


def _call_json(call: ToolCall) -> dict[str, str]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _choice(choice: Any) -> str:
    return choice if isinstance(choice, str) else f"tool:{choice.name}"
