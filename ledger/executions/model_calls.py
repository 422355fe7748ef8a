"""One model request, recorded as a child execution of the native `model_call` (DESIGN 13): what a model
tool and an agent's turn both do each time they ask the model.

The record holds the provider, the model, the messages new since the caller's previous model call (the
instructions on its first), and what came back: the stop reason, the token usage, the latency, the
attempts and the response's messages as the provider sent them. Never headers: the adapters keep none,
and their errors are scrubbed of keys before they get here.
"""

from __future__ import annotations

import time
from typing import Any

from ..actions import natives
from ..errors import LedgerError
from ..models import AssistantMessage, ForcedTool, ModelRequest, ModelResponse, ToolResult, UserMessage
from ..scope import Scope
from . import admission
from .failures import CallFailed
from .records import PendingExecution
from .tree import CallTree, now


def call_model(scope: Scope, tree: CallTree, parent: PendingExecution, provider_name: str, request: ModelRequest,
               *, sequence: int, new_from: int = 0) -> ModelResponse:
    """Send `request` to the provider `provider_name` as the call `parent`'s child number `sequence`.

    `new_from`: the index of the first of `request.messages` that no earlier model_call of `parent`
    recorded (0 on the first call). The parent's usage grows by this call's. A provider that is not
    configured or not open to the tenant fails before anything is sent or recorded (`model_unavailable`);
    a failure of the call itself fails the child, recorded, and raises `CallFailed` with its code.
    """
    try:
        provider = scope.services.models.for_tenant(provider_name, scope.tenant_id)
    except LedgerError as exc:
        raise CallFailed(exc.code, exc.message, exc.hint) from None
    try:
        admission.count_call(tree)  # model calls count toward the tree's call limit, like native calls
    except admission.CallRefused as refused:
        raise CallFailed(refused.code, refused.message, refused.hint) from None
    child_id = scope.services.execution_ids.child(parent.execution_id, parent.attempt, sequence)
    asked = _asked(provider_name, request, new_from)
    child = PendingExecution(
        execution_id=child_id, action_id=natives.MODEL_CALL_ID, action_version=1, status="RUNNING",
        parent_execution_id=parent.execution_id, root_execution_id=parent.root_execution_id,
        call_sequence=sequence, depth=parent.depth + 1, client_id=scope.principal.client_id,
        event={"eventType": "action.invoked", "data": asked, "recordType": None, "recordId": None},
        input=asked, started_at=now(), action_name="model_call", action_kind="model_call",
        parent_attempt=parent.attempt,
    )
    tree.pending.append(child)
    # From here on tokens may be spent: whatever happens, the request that holds the tree is not retried.
    tree.model_called = True
    started = time.monotonic()
    try:
        response = provider.complete(request)
    except LedgerError as exc:
        child.status, child.finished_at = "FAILED", now()
        child.error = {"code": exc.code, "message": exc.message, "hint": exc.hint}
        child.output = {"latencyMs": int((time.monotonic() - started) * 1000)}
        _add_usage(parent, 0, 0)  # a request was made (and may have been billed), though it reported no usage
        raise CallFailed(exc.code, exc.message, exc.hint) from None
    child.status, child.finished_at = "SUCCEEDED", now()
    child.output = answered(response)
    _add_usage(parent, response.usage.input_tokens, response.usage.output_tokens)
    return response


def _add_usage(parent: PendingExecution, input_tokens: int, output_tokens: int) -> None:
    usage = parent.usage or {"inputTokens": 0, "outputTokens": 0, "modelCalls": 0}
    parent.usage = {"inputTokens": usage["inputTokens"] + input_tokens,
                    "outputTokens": usage["outputTokens"] + output_tokens,
                    "modelCalls": usage["modelCalls"] + 1}


def message_json(message: Any) -> dict:
    """A provider-neutral message as a record shows it."""
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, AssistantMessage):
        out: dict = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["toolCalls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
        return out
    if isinstance(message, ToolResult):
        return {"role": "tool", "callId": message.call_id, "name": message.name, "content": message.content,
                "isError": message.is_error}
    raise TypeError(f"not a message: {message!r}")


def _asked(provider_name: str, request: ModelRequest, new_from: int) -> dict:
    asked: dict = {"provider": provider_name, "model": request.model}
    if new_from == 0 and request.instructions:
        asked["instructions"] = request.instructions
    asked["messages"] = [message_json(m) for m in request.messages[new_from:]]
    if request.tools:
        asked["tools"] = [t.name for t in request.tools]
        choice = request.tool_choice
        asked["toolChoice"] = {"tool": choice.name} if isinstance(choice, ForcedTool) else choice
    if request.response_schema is not None and new_from == 0:
        asked["outputSchema"] = request.response_schema
    return asked


def answered(response: ModelResponse) -> dict:
    out = {
        "stopReason": response.stop_reason,
        "usage": {"inputTokens": response.usage.input_tokens, "outputTokens": response.usage.output_tokens},
        "latencyMs": response.latency_ms,
        "attempts": response.attempts,
        "messages": list(response.raw_new_messages),
    }
    if response.ignored_tool_calls:
        out["ignoredToolCalls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                   for c in response.ignored_tool_calls]
    return out
