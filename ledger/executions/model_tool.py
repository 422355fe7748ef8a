"""Kind `model` (DESIGN 13): a typed function computed by a model. A call is one model request: the
action's instructions, the input as JSON in the user message, and the tool's outputSchema asked of the
model as structured output by the provider's own mechanism (the adapters: a `json_schema`
response_format for openai, a forced tool for anthropic). The answer is validated against the
outputSchema; a wrong one goes back to the model once, with what is wrong, before the call fails with
`action_output_invalid`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..actions.schemas import first_error
from ..errors import LedgerError
from ..models import AssistantMessage, ModelRequest, UserMessage
from ..models.types import as_json_text
from ..scope import Scope
from .failures import CallFailed
from .model_calls import call_model
from .records import PendingExecution
from .tree import CallTree

# The first answer, then one corrected answer.
MAX_ANSWERS = 2


def run_model_tool(scope: Scope, tree: CallTree, record: dict, input: Any, pending: PendingExecution,
                   deadline: float) -> Any:
    config = record["config"]
    model = config["model"]
    schema = record["tool"]["outputSchema"]
    try:  # a provider that is not configured, or not open to the tenant: nothing is asked of any model
        scope.services.models.for_tenant(model["provider"], scope.tenant_id)
    except LedgerError as exc:
        raise CallFailed(exc.code, exc.message, exc.hint) from None
    messages: list = [UserMessage(as_json_text(input))]
    recorded = 0
    problem = ""
    for answer in range(1, MAX_ANSWERS + 1):
        request = ModelRequest(
            model=model["name"], messages=tuple(messages), instructions=config["instructions"],
            response_schema=schema, temperature=model.get("temperature"),
            max_output_tokens=model.get("maxOutputTokens"),
            timeout=max(0.001, deadline - time.monotonic()), deadline=deadline,
        )
        response = call_model(scope, tree, pending, model["provider"], request, sequence=answer,
                              new_messages=messages[recorded:], system=config["instructions"] if answer == 1 else None)
        usage = pending.usage or {"inputTokens": 0, "outputTokens": 0, "modelCalls": 0}
        pending.usage = {"inputTokens": usage["inputTokens"] + response.usage.input_tokens,
                         "outputTokens": usage["outputTokens"] + response.usage.output_tokens,
                         "modelCalls": usage["modelCalls"] + 1}
        value, problem = _parse(response.text, schema)
        if not problem:
            return value
        # The next call's new messages are the correction: the answer is already in this call's record.
        recorded = len(messages) + 1
        messages += [AssistantMessage(response.text), UserMessage(correction(problem))]
    raise CallFailed("action_output_invalid",
                     f"the model's answer does not match the tool's outputSchema, after one correction: {problem}",
                     "make the instructions say the answer's shape, simplify the outputSchema, or use a stronger "
                     "model; the model_call children record each answer")


def _parse(text: str, schema: Any) -> tuple[Any, str]:
    """(the answer's value, "") or (None, what is wrong with it, for the model and the error)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        shown = text if len(text) <= 200 else text[:200] + "…"
        return None, f"the answer is not JSON ({exc.msg} at position {exc.pos}): {shown!r}"
    error = first_error(schema, value)
    if error is not None:
        return None, f"at {error[0]}: {error[1]}"
    return value, ""


def correction(problem: str) -> str:
    """What the model is told about its wrong answer."""
    return (f"Your answer does not match the required output schema: {problem}. "
            "Answer again with only a JSON value that matches the schema.")
