"""Running a call tree: one top-level call, its nested tool calls and native calls, inside the caller's
transaction. Each call is a savepoint; each call is an execution row (buffered, written once at the end).

The Starlark program runs in a sandbox executor leased for the whole tree; its host calls (`graphql()`,
`cel()`, `tools.x()`) come back here on the request's thread, where the transaction and the chain live.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import keyword
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from ..actions import natives
from ..actions.schemas import first_error
from ..errors import LedgerError, Retryable
from ..logs import bind_call, unbind_call
from ..policy.cel import CelError, evaluate_expression
from ..policy.chain import Layer
from ..policy.statements import parse_policies
from ..runtime import CallFailure, Program, RunOutcome
from ..scope import Scope, ToolFrame
from .records import PendingExecution
from .values import value_problem

MAX_TOOL_DEPTH = 8
# Where a running call tree is kept in `Scope.request_state`, so that an invokeAction made through
# graphql() joins it (re-entry, depth, count, deadline, records) instead of starting a tree of its own.
TREE_KEY = "call_tree"
MAX_CALLS_BENEATH = 1024
DEFAULT_RESPONSE_TIMEOUT = 30.0


class CallLimitExceeded(LedgerError):
    code = "action_call_limit_exceeded"


class _Failed(Exception):
    """Leaves a call's savepoint so that its writes roll back."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class CallTree:
    """State shared by every call beneath one top-level call."""

    scope: Scope
    pending: list[PendingExecution] = field(default_factory=list)
    calls_beneath: int = 0
    stack: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    # The deadline of every call running now, innermost last: a nested invokeAction through graphql()
    # is bounded by its caller's responseTimeout like any other child.
    deadlines: list[float] = field(default_factory=list)
    lease: Any = None
    # The session of the top-level call ({id, input}), for fixed input's `session`; None without one.
    session: dict | None = None
    # Deadlines of the enclosing tools that narrowed statement_timeout, innermost last.
    statement_bounds: list[float] = field(default_factory=list)

    def executor(self):
        """The tree's executor, leased by its first program; the calls beneath it share the lease.

        The first program waits for an executor at most until its own deadline (DESIGN 17). When
        that deadline is the tool's responseTimeout, the call fails (recorded) as a call that ran
        out of time does; when it is the request's, the whole request is `retryable`.
        """
        if self.lease is None:
            from ..runtime import ExecutorWaitTimedOut

            deadline = self.deadlines[-1] if self.deadlines else self.scope.deadline
            try:
                self.lease = self.scope.services.executor_pool().lease(
                    timeout=max(0.0, deadline - time.monotonic()), tenant=self.scope.tenant_id)
            except ExecutorWaitTimedOut as exc:
                if deadline < self.scope.deadline - 0.1:
                    raise _Failed("action_response_timeout",
                                  f"the call's responseTimeout passed while it waited for a sandbox executor: {exc}",
                                  "retry when fewer calls are running, or raise the tool's responseTimeout") from None
                raise
        return self.lease

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def count_call(self) -> None:
        self.calls_beneath += 1
        if self.calls_beneath > MAX_CALLS_BENEATH:
            raise CallFailure("action_call_limit_exceeded",
                              f"more than {MAX_CALLS_BENEATH} calls beneath one call",
                              "batch the work into fewer calls, or split it across several top-level calls")


def child_execution_id(parent: uuid.UUID, attempt: int, sequence: int) -> uuid.UUID:
    """Deterministic: the same program and input make the same calls with the same ids."""
    return uuid.uuid5(parent, f"{attempt}:{sequence}")


def tool_layer(record: dict) -> Layer:
    if record["native"]:
        return natives.NATIVE_TOOLS[record["name"]]["layer"]
    name = f'tool "{record["name"]}" v{record["version"]}'
    statements, problems = parse_policies(record.get("policies") or [])
    if problems:
        # Checked when written; a stored version that no longer parses fails closed (a dropped DENY
        # would widen what the tool may do).
        return Layer(f"{name} (its stored policies are invalid, so it is allowed nothing: "
                     f"{problems[0]['path']}: {problems[0]['message']})", ())
    return Layer(name, statements)


def response_timeout_seconds(record: dict) -> float:
    timeout_ms = (record.get("tool") or {}).get("responseTimeout")
    return timeout_ms / 1000 if timeout_ms else DEFAULT_RESPONSE_TIMEOUT


def response_deadline(record: dict, outer: float) -> float:
    return min(outer, time.monotonic() + response_timeout_seconds(record))


# ---------------------------------------------------------------------------- one call


def run_call(scope: Scope, tree: CallTree, record: dict, input: Any, *, execution_id: uuid.UUID,
             parent_execution_id: uuid.UUID | None, root_execution_id: uuid.UUID, call_sequence: int | None,
             depth: int, deadline: float, session_id: uuid.UUID | None = None,
             event_type: str = "action.invoked", attempt: int = 1) -> PendingExecution:
    pending = PendingExecution(
        execution_id=execution_id, action_id=record["action_id"], action_version=record["version"],
        status="RUNNING", parent_execution_id=parent_execution_id, root_execution_id=root_execution_id,
        call_sequence=call_sequence, depth=depth, client_id=scope.principal.client_id,
        event={"eventType": event_type, "data": input, "recordType": None, "recordId": None},
        input=input, session_id=session_id, started_at=_now(), attempt=attempt, action_name=record["name"],
        action_kind=record["kind"],
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
    try:
        with scope.savepoint():
            _check_input(record, input)
            if record["kind"] == "tool":
                output = _run_program(scope, tree, record, input, pending, deadline)
            else:
                output = _run_native(scope, tree, record, input, pending)
            _check_output(record, output)
            pending.output = output
            pending.status = "SUCCEEDED"
    except _Failed as failed:
        pending.status = "FAILED"
        pending.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
    finally:
        tree.deadlines.pop()
        unbind_call(log_context)
        if registered:
            scope.request_state.pop(TREE_KEY, None)
    pending.finished_at = _now()
    return pending


def _check_input(record: dict, input: Any) -> None:
    problem = value_problem(input)
    if problem:
        raise _Failed("action_input_invalid", f"the input at {problem[0]}: {problem[1]}",
                      f"fix the input at {problem[0]}")
    schema = (record.get("tool") or {}).get("inputSchema")
    if schema is not None:
        error = first_error(schema, input)
        if error:
            raise _Failed("action_input_invalid", f"the input does not match the tool's inputSchema: {error[1]}",
                          f"fix the input at {error[0]}")


def _check_output(record: dict, output: Any) -> None:
    problem = value_problem(output)
    if problem:
        raise _Failed("action_output_invalid", f"the output at {problem[0]}: {problem[1]}",
                      "return JSON values only, nested at most 32 levels")
    schema = (record.get("tool") or {}).get("outputSchema")
    if schema is not None:
        error = first_error(schema, output)
        if error:
            raise _Failed("action_output_invalid", f"the output does not match the tool's outputSchema: {error[1]}",
                          f"the program returned a wrong value at {error[0]}")


def resolve_tools(scope: Scope, record: dict) -> tuple[dict[str, dict], list[dict]]:
    """The version each reference resolves to for this execution, by tool name."""
    from ..actions.registry import load_action

    by_name: dict[str, dict] = {}
    resolved: list[dict] = []
    origin: dict[str, str] = {}
    for ref in record.get("tools") or []:
        target = load_action(scope, uuid.UUID(str(ref["actionId"])), ref.get("actionVersion"))
        if target is None:
            raise _Failed("action_failure", f"the reference to {ref['name']!r} no longer resolves",
                          "pin an existing version, or write the tool again")
        tool_name = (target.get("tool") or {}).get("name") or target["name"]
        if tool_name in by_name:
            raise _Failed("action_failure",
                          f"references {origin[tool_name]!r} and {ref['name']!r} both resolve to tool name "
                          f"{tool_name!r}",
                          "pin one of them to a version with another tool name, or rename one tool")
        origin[tool_name] = ref["name"]
        by_name[tool_name] = {**target, "reference": ref}
        resolved.append({"name": tool_name, "actionId": str(target["action_id"]), "actionVersion": target["version"]})
    return by_name, resolved


_TOOL_USE = re.compile(r"\btools\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_STARLARK_ONLY_KEYWORDS = frozenset({"load"})


def program_tool_names(source: str, resolved: dict[str, dict]) -> tuple[str, ...]:
    """The names `tools.<name>` offers the program: the resolved tools, and every other name the source uses.

    An unresolved name reaches the host, which refuses it with `tool_not_declared` (e.g. a reference
    whose latest version renamed its tool), instead of a Starlark attribute error.
    """
    used = {name for name in _TOOL_USE.findall(source)
            if not keyword.iskeyword(name) and name not in _STARLARK_ONLY_KEYWORDS}
    return tuple(sorted(used | set(resolved)))


def _run_program(scope: Scope, tree: CallTree, record: dict, input: Any, pending: PendingExecution,
                 deadline: float) -> Any:
    tools, pending.tools = resolve_tools(scope, record)
    frame = ToolFrame(record["action_id"], record["version"], record["name"], pending.execution_id)
    tool_scope = scope.within_tool(frame, scope.chain.extended(tool_layer(record)))
    host = ToolHost(tool_scope, tree, pending, tools, deadline)
    program = Program(key=(str(scope.tenant_id), str(record["action_id"]), record["version"]),
                      source=record["config"]["src"],
                      tool_names=program_tool_names(record["config"]["src"], tools))
    tree.stack.append((record["action_id"], record["version"]))
    # The program's database statements stop at its own deadline when that comes first (one set_config,
    # only for a tool whose responseTimeout ends before the enclosing bound).
    enclosing = tree.statement_bounds[-1] if tree.statement_bounds else scope.deadline
    narrowed = deadline < enclosing - 0.05
    if narrowed:
        tree.statement_bounds.append(deadline)
        _set_statement_timeout(scope, deadline)
    try:
        outcome: RunOutcome = tree.executor().run(program, pending.event, host, deadline)
    finally:
        tree.stack.pop()
        if narrowed:
            tree.statement_bounds.pop()
            # After a failed statement (a graphql() with check=True runs without a savepoint of its own)
            # the call's savepoint rolls back, which restores the enclosing statement_timeout anyway.
            if not _in_failed_transaction(scope):
                _set_statement_timeout(scope, enclosing)
    pending.logs = outcome.logs
    if not outcome.ok:
        raise _Failed(outcome.error_code or "action_failure", outcome.error_message or "the program failed",
                      outcome.error_hint)
    return outcome.output


def _in_failed_transaction(scope: Scope) -> bool:
    from psycopg.pq import TransactionStatus

    return scope.conn.info.transaction_status == TransactionStatus.INERROR


def _set_statement_timeout(scope: Scope, deadline: float) -> None:
    remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
    scope.conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(remaining_ms),))


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
            raise _Failed(code, message, hint)
        return {"data": data, "errors": None}
    try:
        return {"value": evaluate_expression(input["expression"], input.get("vars") or {})}
    except CelError as exc:
        raise _Failed("cel_error", exc.message, exc.hint) from exc


# ---------------------------------------------------------------------------- host calls


def execute_graphql(scope: Scope, document: str, variables: dict | None, operation_name: str | None):
    """Run a document on the request's transaction under `scope`; returns (data, formatted errors).

    A transient database failure (or any `Retryable`) is raised, never returned: a program cannot
    swallow it with `check=False`, and the request is retried as a whole.
    """
    import psycopg
    from strawberry.exceptions import MissingQueryError
    from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError

    from ..api.context import RequestContext
    from ..api.http import error_payload, format_error
    from ..api.schema import schema
    from ..db.pool import as_ledger_error, transient_failure

    def document_error(message: str):
        return None, [error_payload(message, "graphql_validation_failed",
                                    "check the document and its variables against the schema")]

    if operation_name is None and _operation_count(document) > 1:
        # strawberry would silently run the first one.
        return document_error("the document has several operations: name the one to run with `operation_name`")
    try:
        result = schema.execute_sync(document, variable_values=variables, context_value=RequestContext(scope),
                                     operation_name=operation_name)
    except MissingQueryError:
        return document_error("the document is empty")
    except CannotGetOperationTypeError:
        return document_error(f"the document has no operation named {operation_name!r}" if operation_name
                              else "the document has several operations: name the one to run with `operation_name`")
    except InvalidOperationTypeError:
        return document_error("graphql() runs queries and mutations only")
    if not result.errors:
        return result.data, None
    for e in result.errors:
        retry = transient_failure(e.original_error)
        if retry is not None:
            raise retry
        if isinstance(e.original_error, psycopg.Error) and not isinstance(as_ledger_error(e.original_error),
                                                                          LedgerError):
            raise e.original_error
    return result.data, [format_error(e) for e in result.errors]


@functools.lru_cache(maxsize=1024)
def _operation_count(document: str) -> int:
    from graphql import GraphQLError, OperationDefinitionNode, parse

    try:
        parsed = parse(document, no_location=True, max_tokens=20_000)
    except GraphQLError:
        return 1  # the execution reports the syntax error
    return sum(isinstance(d, OperationDefinitionNode) for d in parsed.definitions)


# Codes a failed graphql() keeps with check=True: denials, the domain's business rules and call limits.
# Anything else (a document error, a missing record, an uncallable action, ...) is `graphql_error`.
_KEPT_CODES = frozenset({"action_permission_denied", "action_call_limit_exceeded",
                         "insufficient_funds", "currency_mismatch", "invalid_amount", "already_exists"})


def graphql_failure(errors: list[dict]) -> tuple[str, str, str | None]:
    first = errors[0]
    ext = first.get("extensions") or {}
    code = ext.get("code") or "graphql_error"
    if code == "permission_denied":
        code = "action_permission_denied"
    elif code not in _KEPT_CODES:
        code = "graphql_error"
    return code, first.get("message", "the document failed"), ext.get("hint")


def merge_fixed_input(supplied: Any, fixed: Any, session: dict | None, event: dict) -> Any:
    """The reference's fixed values replace what the program supplied; `{"$cel": expr}` values are
    evaluated once per call over `session` and `event`."""
    if not fixed:
        return supplied
    if not isinstance(fixed, dict):
        return fixed
    resolved: dict = {}
    for key, value in fixed.items():
        if isinstance(value, dict) and set(value) == {"$cel"}:
            try:
                resolved[key] = evaluate_expression(value["$cel"], {"session": session, "event": event})
            except CelError as exc:
                raise _Failed("action_input_invalid", f"the fixed input {key!r} could not be evaluated: {exc.message}",
                              "fix the $cel expression of the reference's fixed input") from exc
        else:
            resolved[key] = value
    base = supplied if isinstance(supplied, dict) else {}
    return {**base, **resolved}


class ToolHost:
    """The server side of one running program's host calls."""

    def __init__(self, scope: Scope, tree: CallTree, pending: PendingExecution, tools: dict[str, dict],
                 deadline: float) -> None:
        self.scope = scope
        self.tree = tree
        self.pending = pending
        self.tools = tools
        self.deadline = deadline
        self.sequence = 0

    def _next_child(self) -> tuple[int, uuid.UUID]:
        self.tree.count_call()
        self.sequence += 1
        return self.sequence, child_execution_id(self.pending.execution_id, self.pending.attempt, self.sequence)

    def _native_child(self, name: str, input: Any, sequence: int, child_id: uuid.UUID) -> PendingExecution:
        child = PendingExecution(
            execution_id=child_id, action_id=natives.NATIVE_TOOLS[name]["id"], action_version=1, status="RUNNING",
            parent_execution_id=self.pending.execution_id, root_execution_id=self.pending.root_execution_id,
            call_sequence=sequence, depth=self.pending.depth + 1, client_id=self.scope.principal.client_id,
            event={"eventType": "action.invoked", "data": input, "recordType": None, "recordId": None},
            input=input, started_at=_now(), action_name=name,
        )
        self.tree.pending.append(child)
        return child

    def graphql(self, document: str, variables: dict | None, operation_name: str | None, check: bool) -> Any:
        sequence, child_id = self._next_child()
        input = {"document": document, "variables": variables, "operationName": operation_name}
        child = self._native_child("graphql", input, sequence, child_id)
        # A native child adds no tool frame: writes made through it stay attributed to the calling tool.
        graphql_scope = replace(self.scope, chain=self.scope.chain.extended(natives.NATIVE_TOOLS["graphql"]["layer"]))
        errors = None
        # With check=True a failure fails the calling tool (a program cannot catch it), whose own savepoint
        # then rolls back everything this call did: a savepoint of its own (two round trips) is needed
        # only when the program goes on after a failure (check=False).
        savepoint = self.scope.savepoint() if not check else contextlib.nullcontext()
        try:
            try:
                with savepoint:
                    data, errors = execute_graphql(graphql_scope, document, variables, operation_name)
                    if errors:
                        raise _Failed(*graphql_failure(errors))
            except Retryable:
                if time.monotonic() < self.deadline - 0.1:
                    raise  # a lost race or the request's own deadline: the whole request retries
                # The statement ran into this tool's responseTimeout (statement_timeout), not the request's.
                raise _Failed("action_response_timeout", "the tool's database work ran past its responseTimeout",
                              "make the tool do less per call, or raise its responseTimeout") from None
        except _Failed as failed:
            child.status = "FAILED"
            child.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
            child.output = {"data": None, "errors": errors}
            child.finished_at = _now()
            if check:
                raise CallFailure(failed.code, failed.message, failed.hint) from None
            return {"data": None, "errors": errors}
        child.status = "SUCCEEDED"
        child.output = {"data": data, "errors": None}
        child.finished_at = _now()
        return data if check else {"data": data, "errors": None}

    def cel(self, expression: str, variables: dict | None, check: bool) -> Any:
        sequence, child_id = self._next_child()
        child = self._native_child("cel", {"expression": expression, "vars": variables}, sequence, child_id)
        try:
            value = evaluate_expression(expression, variables or {})
        except CelError as exc:
            child.finished_at = _now()
            child.status = "FAILED"
            child.error = {"code": "cel_error", "message": exc.message, "hint": exc.hint}
            if check:
                raise CallFailure("cel_error", exc.message, exc.hint) from None
            return {"status": "FAILED", "error": child.error, "executionId": str(child_id)}
        child.finished_at = _now()
        child.status = "SUCCEEDED"
        child.output = {"value": value}
        if check:
            return value
        # The same shape as a failure, so that a program can test r["status"] (as with tools.x).
        return {"status": "SUCCEEDED", "output": child.output, "executionId": str(child_id)}

    def _refused_child(self, target: dict, input: Any, sequence: int, child_id: uuid.UUID,
                       failed: "_Failed") -> PendingExecution:
        """A call that fails before its program runs (its fixed input could not be resolved)."""
        child = PendingExecution(
            execution_id=child_id, action_id=target["action_id"], action_version=target["version"], status="FAILED",
            parent_execution_id=self.pending.execution_id, root_execution_id=self.pending.root_execution_id,
            call_sequence=sequence, depth=self.pending.depth + 1, client_id=self.scope.principal.client_id,
            event={"eventType": "action.invoked", "data": input, "recordType": None, "recordId": None},
            input=input, started_at=_now(), finished_at=_now(), action_name=target["name"],
            error={"code": failed.code, "message": failed.message, "hint": failed.hint},
        )
        self.tree.pending.append(child)
        return child

    def call_tool(self, name: str, input: Any, check: bool) -> Any:
        target = self.tools.get(name)
        if target is None:
            raise CallFailure("tool_not_declared", f"the program called `tools.{name}`, which its invocation did "
                              "not resolve", "declare the tool in the action's `tools` references")
        if self.pending.depth + 1 > MAX_TOOL_DEPTH:
            raise CallFailure("action_call_limit_exceeded",
                              f"calling {name!r} would go deeper than {MAX_TOOL_DEPTH} tool levels",
                              "flatten the call tree")
        if (target["action_id"], target["version"]) in self.tree.stack:
            raise CallFailure("action_call_limit_exceeded",
                              f"{name!r} v{target['version']} is already on the call stack; a call never re-enters it",
                              "restructure the tools so that none calls back into its caller")
        if target["status"] != "ACTIVE" or target["pending"] or not target["enabled"]:
            raise CallFailure("action_failure", f"the tool {name!r} is not callable ({target['status']})",
                              "publish or enable the tool it references")
        sequence, child_id = self._next_child()
        reference = target.get("reference") or {}
        try:
            input = merge_fixed_input(input, reference.get("input"), self.tree.session, self.pending.event)
        except _Failed as failed:
            child = self._refused_child(target, input, sequence, child_id, failed)
        else:
            child = run_call(self.scope, self.tree, target, input, execution_id=child_id,
                             parent_execution_id=self.pending.execution_id,
                             root_execution_id=self.pending.root_execution_id, call_sequence=sequence,
                             depth=self.pending.depth + 1, deadline=self.deadline)
            if (child.status == "FAILED" and child.error["code"] == "action_input_invalid"
                    and reference.get("input") and reference.get("actionVersion") is None):
                child.error["hint"] = (f"the reference to {reference.get('name')!r} has no version, and version "
                                       f"{target['version']} does not accept its fixed input: pin a version that "
                                       "accepts the fixed input, or change the fixed input")
        if child.status == "SUCCEEDED":
            if check:
                return child.output
            return {"status": "SUCCEEDED", "output": child.output, "executionId": str(child_id)}
        if check:
            raise CallFailure(child.error["code"], child.error["message"], child.error.get("hint"))
        return {"status": "FAILED", "error": child.error, "executionId": str(child_id)}

