"""Running a call tree: one top-level call, its nested tool calls and native calls, inside the caller's
transaction. Each call is a savepoint (deferred: sent with the call's first statement, not at all for a call
that makes none); each call is an execution row (buffered, written once at the end).

The Starlark program runs in a sandbox executor leased for the whole tree; its host calls come back to
`ToolHost` (executions/host.py) on the request's thread, where the transaction and the chain live.
The tree's shared state is `CallTree` (executions/tree.py); what a call may do before it runs is
executions/admission.py. An agent's call is a turn of its model (executions/agent_turn.py), whose tool
calls come back here as children the same way.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any, Protocol

from ..actions import natives
from ..actions.schemas import first_error
from ..db.pool import deferred_savepoint
from ..logs import bind_call, unbind_call
from ..policy.cel import CelError, evaluate_expression
from ..policy.chain import Layer
from ..policy.layers import layer_from_stored
from ..runtime import CallFailure, Program, RunOutcome
from ..scope import Scope, ToolFrame
from ..values import value_problem
from .agent_turn import run_turn
from .failures import CallFailed, graphql_failure
from .host import ToolHost, execute_graphql
from .model_tool import run_model_tool
from .records import PendingExecution
from .references import program_tool_names, resolve_tools
from .statement_timeout import statements_bounded_by
from .tree import TREE_KEY, CallTree, now, response_deadline

# CallTree and TREE_KEY stay importable from here: whoever drives a tree runs it with run_call.
__all__ = ["CallBody", "CallTree", "TREE_KEY", "run_call", "tool_layer"]


def tool_layer(record: dict) -> Layer:
    if record["native"]:
        return natives.NATIVE_TOOLS[record["name"]]["layer"]
    kind = "agent" if record["kind"] == "agent" else "tool"
    return layer_from_stored(f'{kind} "{record["name"]}" v{record["version"]}', record.get("policies") or [])


# ---------------------------------------------------------------------------- one call


class CallBody(Protocol):
    """What a call acting for an MCP server's caller does (see `run_call`): its output."""

    def __call__(self, scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float) -> Any: ...


def run_call(scope: Scope, tree: CallTree, record: dict, input: Any, *, execution_id: uuid.UUID,
             parent_execution_id: uuid.UUID | None, root_execution_id: uuid.UUID, call_sequence: int | None,
             depth: int, deadline: float, session_id: uuid.UUID | None = None,
             event_type: str = "action.invoked", attempt: int = 1,
             parent_attempt: int | None = None, body: CallBody | None = None,
             event: dict | None = None) -> PendingExecution:
    """One call in its savepoint. `body`: what the call does instead of a program or a native of its
    own, for the natives that act for an MCP server's caller (their behaviour lives above this layer);
    it raises CallFailure to fail the call. `event`: the run's recorded event (a trigger's typed event),
    instead of one of `event_type` whose data is the input."""
    pending = PendingExecution(
        execution_id=execution_id, action_id=record["action_id"], action_version=record["version"],
        status="RUNNING", parent_execution_id=parent_execution_id, root_execution_id=root_execution_id,
        call_sequence=call_sequence, depth=depth, client_id=scope.principal.client_id,
        event=event or {"eventType": event_type, "data": input, "recordType": None, "recordId": None},
        input=input, session_id=session_id, started_at=now(), attempt=attempt, action_name=record["name"],
        action_kind=record["kind"], parent_attempt=parent_attempt,
    )
    tree.pending.append(pending)
    deadline = response_deadline(record, deadline)
    tree.deadlines.append(deadline)
    # Whoever drives the tree (invokeAction, a queue worker), nested invokes must find it.
    registered = scope.request_state.get(TREE_KEY) is None
    if registered:
        scope.request_state[TREE_KEY] = tree
    log_context = bind_call(execution_id=execution_id, root_execution_id=root_execution_id,
                            tenant=scope.tenant_id, action=record["name"])
    # The call's savepoint is deferred: sent with its first statement, and not at all if it makes none.
    try:
        with deferred_savepoint(scope.conn):
            _check_input(record, input)
            if body is not None:
                try:
                    output = body(scope, tree, pending, deadline)
                except CallFailure as failure:
                    raise CallFailed(failure.code, failure.message, failure.hint) from None
            elif record["kind"] == "tool":
                output = _run_program(scope, tree, record, input, pending, deadline)
            elif record["kind"] == "agent":
                output = run_turn(scope, tree, record, input, pending, deadline, layer=tool_layer(record),
                                  run_call=run_call)
            elif record["kind"] == "model":
                output = run_model_tool(scope, tree, record, input, pending, deadline)
            else:
                output = _run_native(scope, tree, record, input, pending)
            _check_output(record, output)
            pending.output = output
            pending.status = "SUCCEEDED"
    except CallFailed as failed:
        pending.status = "FAILED"
        pending.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
    finally:
        tree.deadlines.pop()
        unbind_call(log_context)
        if registered:
            scope.request_state.pop(TREE_KEY, None)
    pending.finished_at = now()
    return pending


def _check_input(record: dict, input: Any) -> None:
    problem = value_problem(input)
    if problem:
        raise CallFailed("action_input_invalid", f"the input at {problem[0]}: {problem[1]}",
                         f"fix the input at {problem[0]}")
    schema = (record.get("tool") or {}).get("inputSchema")
    if schema is not None:
        error = first_error(schema, input)
        if error:
            raise CallFailed("action_input_invalid", f"the input does not match the tool's inputSchema: {error[1]}",
                             f"fix the input at {error[0]}")


def _check_output(record: dict, output: Any) -> None:
    problem = value_problem(output)
    if problem:
        raise CallFailed("action_output_invalid", f"the output at {problem[0]}: {problem[1]}",
                         "return JSON values only, nested at most 32 levels")
    schema = (record.get("tool") or {}).get("outputSchema")
    if schema is not None:
        error = first_error(schema, output)
        if error:
            raise CallFailed("action_output_invalid", f"the output does not match the tool's outputSchema: {error[1]}",
                             f"the program returned a wrong value at {error[0]}")


def _run_program(scope: Scope, tree: CallTree, record: dict, input: Any, pending: PendingExecution,
                 deadline: float) -> Any:
    tools, pending.tools = resolve_tools(scope, record)
    frame = ToolFrame(record["action_id"], record["version"], record["name"], pending.execution_id)
    tool_scope = scope.within_tool(frame, scope.chain.extended(tool_layer(record)))
    host = ToolHost(tool_scope, tree, pending, tools, deadline, run_call)
    program = Program(key=(str(scope.tenant_id), str(record["action_id"]), record["version"]),
                      source=record["config"]["src"],
                      tool_names=_tool_names(record["config"]["src"], tuple(tools)))
    tree.stack.append((record["action_id"], record["version"]))
    try:
        # Deferred too: a program that makes no statement sends neither the narrowing nor its reset.
        with statements_bounded_by(scope, tree, deadline):
            outcome: RunOutcome = tree.executor().run(program, pending.event, host, deadline)
    finally:
        tree.stack.pop()
    pending.logs = outcome.logs
    if not outcome.ok:
        raise CallFailed(outcome.error_code or "action_failure", outcome.error_message or "the program failed",
                         outcome.error_hint)
    return outcome.output


@functools.lru_cache(maxsize=1024)
def _tool_names(source: str, resolved: tuple[str, ...]) -> tuple[str, ...]:
    """`program_tool_names`, a function of the source and the resolved names, kept: it scans the source
    with a regular expression, on every call of the program otherwise."""
    return program_tool_names(source, dict.fromkeys(resolved))


def _run_native(scope: Scope, tree: CallTree, record: dict, input: Any, pending: PendingExecution) -> Any:
    """A native tool (or an action of a native kind) run directly as a call."""
    native_scope = scope.within_tool(
        ToolFrame(record["action_id"], record["version"], record["name"], pending.execution_id),
        scope.chain.extended(tool_layer(record)),
    )
    if record["kind"] == "graphql":
        data, errors = execute_graphql(native_scope, input["document"], input.get("variables"),
                                       input.get("operationName"))
        if errors:
            code, message, hint = graphql_failure(errors)
            raise CallFailed(code, message, hint)
        return {"data": data, "errors": None}
    try:
        return {"value": evaluate_expression(input["expression"], input.get("vars") or {})}
    except CelError as exc:
        raise CallFailed("cel_error", exc.message, exc.hint) from exc
