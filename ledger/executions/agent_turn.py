"""An agent's turn (DESIGN 13): one call of an action of kind `agent`, a tool loop driven by a model.

1. The references resolve once; the model sees each tool's name, description and inputSchema (fixed
   properties removed), and `read_result` when a tool's results may be offloaded.
2. The model is called with the instructions, the session's earlier turns and the turn's input as JSON;
   each model call is a child execution of the native `model_call` (executions/model_calls.py).
3. Each tool call of a response is a child execution, in order, under the caller's layer, the agent's and
   the tool's. Whatever happens to it comes back to the model as a result, a failure as
   `"<code>: <message>\\nhint: <hint>"`; all the results of one response go back together, as one round.
4. The loop ends with an answer without tool calls; after `maxRounds` rounds, or with the budget spent,
   the next call is made with `tool_choice: "none"`. At 80% of the budget the model is told so.
5. The final answer is validated against the outputSchema, with one corrective retry.

Every tool call goes through `_call_tool`, the one place a call's fate is decided: nothing else runs a tool
for the model. A call through a `confirm: true` reference becomes a planned action (executions/planned.py,
DESIGN 14) in the turn's host: the model gets the planned result, and the tool does not run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

from ..actions.natives import READ_RESULT_INPUT, NATIVE_TOOLS
from ..actions.schemas import first_error
from ..errors import LedgerError, Retryable
from ..models import AssistantMessage, Message, ModelRequest, ModelUnavailable, ToolCall, ToolResult, ToolSpec, UserMessage
from ..models.types import as_json_text
from ..policy.chain import Layer
from ..runtime import CallFailure
from ..scope import Scope, ToolFrame
from . import sessions
from .failures import CallFailed
from .host import ToolHost
from .model_calls import call_model
from .offload import json_bytes, offloaded, read_slice
from .planned import Proposer, propose
from .records import PendingExecution
from .references import resolve_tools
from .tree import CallTree, now

READ_RESULT = "read_result"
# Time kept before the request's deadline to record the turn (its rows are written when it ends): a
# deadline that passes during a model call is then the turn's recorded `action_response_timeout`.
RECORD_MARGIN_SECONDS = 1.0
BUDGET_WARNING = (4, 5)  # 80%
AGENT_SLOTS_LOCK = "ledger called agents"


@dataclass
class Budget:
    """The turn's budget (harness.budget): tool calls made, and input plus output tokens spent."""

    tool_calls_limit: int
    tokens_limit: int
    tool_calls: int = 0
    tokens: int = 0

    def notes(self) -> list[str]:
        """The budget notes for a round, once 80% of either is used."""
        out = []
        for used, limit, what in ((self.tool_calls, self.tool_calls_limit, "tool calls"),
                                  (self.tokens, self.tokens_limit, "tokens")):
            if used * BUDGET_WARNING[1] >= limit * BUDGET_WARNING[0]:
                out.append(f"Budget low: {used} of {limit} {what} used. Finish with what you have.")
        return out

    def spent(self) -> bool:
        return self.tool_calls >= self.tool_calls_limit or self.tokens >= self.tokens_limit


@dataclass
class _Turn:
    scope: Scope          # the agent's: the caller's layer and its own
    tree: CallTree
    pending: PendingExecution
    host: ToolHost
    tools: dict[str, dict]
    over_tokens: int
    budget: Budget
    max_payload_bytes: int
    # This turn's own tool results, by executionId: all that read_result may read.
    results: dict[str, Any] = field(default_factory=dict)
    offloads: bool = False


def run_turn(scope: Scope, tree: CallTree, record: dict, input: Any, pending: PendingExecution, deadline: float,
             *, layer: Layer, run_call: Callable[..., PendingExecution]) -> Any:
    """The turn's output: the final answer, `{"text": ...}` without an outputSchema."""
    config = record["config"]
    model, harness = config["model"], config["harness"]
    try:  # checked at call time: providers are configuration and can change (DESIGN 13)
        scope.services.models.for_tenant(model["provider"], scope.tenant_id)
    except ModelUnavailable as exc:
        raise CallFailed(exc.code, exc.message, exc.hint) from None
    if not tree.on_worker:
        _hold_agent_slot(scope)
    deadline = _turn_deadline(scope, deadline)
    tools, pending.tools = resolve_tools(scope, record)
    frame = ToolFrame(record["action_id"], record["version"], record["name"], pending.execution_id)
    agent_scope = scope.within_tool(frame, scope.chain.extended(layer))
    turn = _Turn(scope=agent_scope, tree=tree, pending=pending,
                 host=ToolHost(agent_scope, tree, pending, tools, deadline, run_call,
                               propose=partial(propose, proposer=Proposer(agent=(record["action_id"], record["version"])))),
                 tools=tools,
                 over_tokens=harness["context"]["offload"]["over_tokens"],
                 budget=Budget(harness["budget"]["toolCalls"], harness["budget"]["tokens"]),
                 max_payload_bytes=scope.services.settings.max_payload_bytes)
    specs = _tool_specs(turn)
    output_schema = (record.get("tool") or {}).get("outputSchema")
    messages: list[Message] = []
    if pending.session_id is not None:
        for earlier in sessions.earlier_turns(scope, pending.session_id, harness["context"]["history"]):
            messages.append(UserMessage(as_json_text(earlier["input"])))
            messages.append(AssistantMessage(content=_answer_text(earlier["output"], output_schema)))
    messages.append(UserMessage(as_json_text(input)))
    instructions = config["instructions"] or None
    usage = {"inputTokens": 0, "outputTokens": 0, "modelCalls": 0}
    pending.usage = usage  # a failed turn keeps what it spent
    recorded, rounds, corrected = 0, 0, False
    tree.stack.append((record["action_id"], record["version"]))
    try:
        while True:
            choice = "none" if rounds >= harness["maxRounds"] or turn.budget.spent() else "auto"
            request = ModelRequest(
                model=model["name"], messages=tuple(messages), instructions=instructions, tools=tuple(specs),
                tool_choice=choice, response_schema=output_schema, temperature=model.get("temperature"),
                max_output_tokens=model.get("maxOutputTokens"),
                timeout=max(0.001, deadline - time.monotonic()), deadline=deadline)
            response = call_model(scope, tree, pending, model["provider"], request,
                                  sequence=turn.host.next_uncounted_sequence(), new_messages=messages[recorded:],
                                  system=instructions if recorded == 0 else None)
            usage["inputTokens"] += response.usage.input_tokens
            usage["outputTokens"] += response.usage.output_tokens
            usage["modelCalls"] += 1
            turn.budget.tokens = usage["inputTokens"] + usage["outputTokens"]
            if response.tool_calls and choice != "none":
                rounds += 1
                messages.append(AssistantMessage(content=response.text or None, tool_calls=response.tool_calls))
                recorded = len(messages)  # the response is recorded as the model call's output
                results = [_call_tool(turn, call) for call in response.tool_calls]
                notes = turn.budget.notes()
                if notes:
                    last = results[-1]
                    results[-1] = replace(last, content=last.content + "".join(f"\n\n{n}" for n in notes))
                messages.extend(results)
                continue
            messages.append(AssistantMessage(content=response.text))
            recorded = len(messages)
            output, problem = _final_output(response.text, output_schema)
            if problem is None:
                return output
            path, message = problem
            if corrected:
                raise CallFailed("action_output_invalid",
                                 f"the agent's final answer does not match its outputSchema at {path or '/'}: "
                                 f"{message}",
                                 "the model answered outside the schema twice; describe the shape in the "
                                 "instructions, or loosen the tool block's outputSchema")
            corrected = True
            messages.append(UserMessage(
                f"Your final answer does not match the required output schema at {path or '/'}: {message}. "
                "Answer again with only a JSON value of that shape."))
    finally:
        tree.stack.pop()


# ---------------------------------------------------------------------------- what the model sees


def _tool_specs(turn: _Turn) -> list[ToolSpec]:
    specs = []
    for name, target in turn.tools.items():
        block = target.get("tool") or {}
        fixed = (target.get("reference") or {}).get("input") or {}
        specs.append(ToolSpec(name, block.get("description") or "", _without_fixed(block.get("inputSchema"), fixed)))
        if (block.get("output") or {}).get("offload", "AUTO") == "AUTO":
            turn.offloads = True
    if turn.offloads:
        specs.append(ToolSpec(READ_RESULT, NATIVE_TOOLS[READ_RESULT]["description"], READ_RESULT_INPUT))
    return specs


def _without_fixed(schema: Any, fixed: dict) -> dict:
    """The inputSchema without the properties a reference fixes: the model never sees them."""
    if not isinstance(schema, dict):
        return {"type": "object"}
    if not fixed or not isinstance(schema.get("properties"), dict):
        return schema
    out = dict(schema)
    out["properties"] = {k: v for k, v in schema["properties"].items() if k not in fixed}
    if isinstance(schema.get("required"), list):
        out["required"] = [k for k in schema["required"] if k not in fixed]
    return out


def _answer_text(output: Any, output_schema: Any) -> str:
    """An earlier turn's final answer as the model gave it."""
    if output_schema is None and isinstance(output, dict) and set(output) == {"text"} and isinstance(output["text"], str):
        return output["text"]
    return as_json_text(output)


def _final_output(text: str, schema: Any) -> tuple[Any, tuple[str, str] | None]:
    if schema is None:
        return {"text": text}, None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        return None, ("", f"the answer is not JSON ({exc})")
    error = first_error(schema, value)
    return (value, None) if error is None else (None, error)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# ---------------------------------------------------------------------------- one tool call


def _error_result(call: ToolCall, code: str, message: str, hint: str | None) -> ToolResult:
    content = f"{code}: {message}" + (f"\nhint: {hint}" if hint else "")
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)


def _parse_arguments(call: ToolCall) -> tuple[Any, CallFailed | None]:
    try:
        return json.loads(call.arguments or "", parse_constant=_no_constant), None
    except ValueError as exc:
        return None, CallFailed("action_input_invalid", f"the arguments are not JSON ({exc}) at the path \"\"",
                                "send the arguments as one JSON object matching the tool's inputSchema")


def _call_tool(turn: _Turn, call: ToolCall) -> ToolResult:
    """The one way a tool call of the model is made; its result as the model sees it."""
    budget = turn.budget
    if budget.tool_calls >= budget.tool_calls_limit:
        return _error_result(call, "action_call_limit_exceeded",
                             f"the turn's budget of {budget.tool_calls_limit} tool calls is spent: this call was "
                             "not run", "give your final answer with what you have")
    budget.tool_calls += 1
    if call.name == READ_RESULT and turn.offloads:
        return _read_result(turn, call)
    target = turn.tools.get(call.name)
    if target is None:
        declared = ", ".join([*turn.tools, *([READ_RESULT] if turn.offloads else [])]) or "none"
        return _error_result(call, "tool_not_declared", f"there is no tool {call.name!r} in this turn",
                             f"call one of the declared tools: {declared}")
    arguments, not_json = _parse_arguments(call)
    if not_json is not None:
        try:
            sequence, child_id = turn.host.next_call(target, call.name)
        except CallFailure as refused:
            return _error_result(call, refused.code, refused.message, refused.hint)
        turn.host.refused_call(target, call.arguments, sequence, child_id, not_json)
        return _error_result(call, not_json.code, not_json.message, not_json.hint)
    try:
        outcome = _run_tool(turn, target, call.name, arguments)
    except CallFailure as refused:  # admission (call limits) or a tool that is not callable now
        return _error_result(call, refused.code, refused.message, refused.hint)
    if outcome["status"] != "SUCCEEDED":
        error = outcome["error"]
        return _error_result(call, error["code"], error["message"], error.get("hint"))
    execution_id, output = outcome["executionId"], outcome["output"]
    turn.results[execution_id] = output
    if (target.get("tool") or {}).get("output", {}).get("offload", "AUTO") == "AUTO":
        output = offloaded(execution_id, output, turn.over_tokens)
    return ToolResult(call_id=call.id, name=call.name, content=as_json_text(output))


class _TooLarge(Exception):
    """Leaves a tool call's savepoint: its result passed the sandbox's payload bound."""


def _run_tool(turn: _Turn, target: dict, name: str, arguments: Any) -> dict:
    """The call as `tools.x(input, check=False)` makes it. A program's output crosses the sandbox pipe,
    which bounds it; any other tool's result is bounded here, rolling its writes back."""
    if target["kind"] == "tool":
        return turn.host.call_tool(name, arguments, False)
    first = len(turn.tree.pending)
    outcome: dict = {}
    try:
        with turn.scope.savepoint():
            outcome = turn.host.call_tool(name, arguments, False)
            if outcome["status"] == "SUCCEEDED" and json_bytes(outcome["output"]) > turn.max_payload_bytes:
                raise _TooLarge()
    except _TooLarge:
        child = next(p for p in turn.tree.pending[first:] if str(p.execution_id) == outcome["executionId"])
        size = json_bytes(outcome["output"])
        child.status, child.output = "FAILED", None
        child.error = {"code": "action_resource_exhausted",
                       "message": f"the tool's result is {size} bytes, over the sandbox's payload bound of "
                                  f"{turn.max_payload_bytes} bytes",
                       "hint": "ask for less at once (a filter, a page), so that the result fits"}
        return {"status": "FAILED", "error": child.error, "executionId": outcome["executionId"]}
    return outcome


def _read_result(turn: _Turn, call: ToolCall) -> ToolResult:
    """`read_result`: a slice of one of this turn's own results, as a child execution; never offloaded."""
    try:
        sequence, child_id = turn.host.next_call()
    except CallFailure as refused:
        return _error_result(call, refused.code, refused.message, refused.hint)
    arguments, not_json = _parse_arguments(call)
    child = turn.host.native_call(READ_RESULT, call.arguments if not_json else arguments, sequence, child_id)
    try:
        if not_json is not None:
            raise not_json
        error = first_error(READ_RESULT_INPUT, arguments)
        if error is not None:
            raise CallFailed("action_input_invalid", f"the input does not match read_result's inputSchema: {error[1]}",
                             f"fix the input at {error[0]}")
        if arguments["executionId"] not in turn.results:
            raise CallFailed("not_found", f"no tool result of this turn has executionId {arguments['executionId']!r}",
                             "read_result reads only this turn's own tool results: use the $offloaded id of one")
        try:
            value = read_slice(turn.results[arguments["executionId"]], arguments.get("path"),
                               arguments.get("offset"), arguments.get("limit"))
        except LedgerError as exc:
            raise CallFailed(exc.code, exc.message, exc.hint) from None
    except CallFailed as failed:
        child.status, child.finished_at = "FAILED", now()
        child.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
        return _error_result(call, failed.code, failed.message, failed.hint)
    child.status, child.output, child.finished_at = "SUCCEEDED", value, now()
    return ToolResult(call_id=call.id, name=call.name, content=as_json_text(value))


# ---------------------------------------------------------------------------- a model in a transaction


def _turn_deadline(scope: Scope, deadline: float) -> float:
    """The turn's deadline, keeping time before the request's own to record the turn."""
    margin = min(RECORD_MARGIN_SECONDS, max(0.0, scope.deadline - time.monotonic()) * 0.1)
    return min(deadline, scope.deadline - margin)


def _hold_agent_slot(scope: Scope) -> None:
    """One of the tenant's LEDGER_AGENT_CALLS_PER_TENANT slots for called agents, held by this transaction
    until it ends (a transaction-level advisory lock, so across every process on the database); a request
    already holding one keeps it for its later agents. None free: `retryable`, at once."""
    limit = scope.services.settings.agent_calls_per_tenant
    key = f"{AGENT_SLOTS_LOCK} {scope.tenant_id}"
    for slot in range(limit):
        row = scope.one("SELECT pg_try_advisory_xact_lock(hashtext(%s), %s) AS held", (key, slot))
        if row["held"]:
            return
    raise Retryable(f"{limit} called agents of this tenant are already running, each holding a transaction",
                    hint="retry shortly, or start the agent (startAction), which runs on a worker")
