"""The server side of a running program's host calls: `graphql()`, `cel()` and `tools.x()`.

They come back here on the request's thread, where the transaction and the chain live. A tool call
runs its child with the engine's `run_call`, which the engine hands the host when it builds it.
"""

from __future__ import annotations

import datetime
import functools
import time
import uuid
from dataclasses import replace
from typing import Any, Callable

from ..actions import natives
from ..errors import Retryable
from ..policy.cel import CelError, evaluate_expression
from ..runtime import CallFailure
from ..scope import Scope
from . import admission
from .failures import CallFailed, graphql_failure
from .fixed_input import merge_fixed_input
from .records import PendingExecution
from .tree import CallTree

# `tree.now` without its frame and its two attribute reads (each graphql() reads the clock twice).
now = functools.partial(datetime.datetime.now, datetime.timezone.utc)


def execute_graphql(scope: Scope, document: str, variables: dict | None, operation_name: str | None):
    """Run a document on the request's transaction under `scope`: (data, errors in the response format).
    A transient failure is raised, never returned (the services' GraphQL runner says how)."""
    return scope.services.graphql(scope, document, variables, operation_name)


class ToolHost:
    """The server side of one running program's host calls."""

    def __init__(self, scope: Scope, tree: CallTree, pending: PendingExecution, tools: dict[str, dict],
                 deadline: float, run_call: Callable[..., PendingExecution],
                 propose: Callable[..., PendingExecution] | None = None) -> None:
        """`propose`: how a call through a `confirm` reference becomes a planned action (DESIGN 14), given
        by the server or agent whose tools the program calls; without it such a call fails closed."""
        self.scope = scope
        self.run_call = run_call
        self.propose = propose
        self.tree = tree
        self.pending = pending
        self.tools = tools
        self.deadline = deadline
        self.sequence = 0
        self._graphql: Scope | None = None
        # `execution_ids.child` of this host's attempt, made at its first call (a host serves one attempt).
        self._child_id: Callable[[int], uuid.UUID] | None = None

    def _next_child(self, target: dict | None = None, name: str | None = None) -> tuple[int, uuid.UUID]:
        """Admit the next call (a tool `target`, called `name`, or a native call) and give it its id."""
        try:
            if target is None:
                admission.count_call(self.tree)
            else:
                admission.admit(self.tree, target, name)
        except admission.CallRefused as refused:
            raise CallFailure(refused.code, refused.message, refused.hint) from None
        self.sequence += 1
        # Deterministic (the same program and input make the same calls with the same ids), and keyed:
        # no client can compute a child's id and take it first.
        child_id = self._child_id
        if child_id is None:
            child_id = self._child_id = self.scope.services.execution_ids.children_of(self.pending.execution_id,
                                                                                     self.pending.attempt)
        return self.sequence, child_id(self.sequence)

    # The same steps for a caller that is not a program (an agent's turn, executions/agent_turn.py): its
    # calls share one sequence, one admission and the same records.
    def next_call(self, target: dict | None = None, name: str | None = None) -> tuple[int, uuid.UUID]:
        return self._next_child(target, name)

    def next_uncounted_sequence(self) -> int:
        """The next call sequence, for a call that admits and counts itself (a model call)."""
        self.sequence += 1
        return self.sequence

    def native_call(self, name: str, input: Any, sequence: int, child_id: uuid.UUID) -> PendingExecution:
        return self._native_child(name, input, sequence, child_id)

    def refused_call(self, target: dict, input: Any, sequence: int, child_id: uuid.UUID,
                     failed: "CallFailed") -> PendingExecution:
        return self._refused_child(target, input, sequence, child_id, failed)

    def _native_child(self, name: str, input: Any, sequence: int, child_id: uuid.UUID) -> PendingExecution:
        child = PendingExecution(
            execution_id=child_id, action_id=natives.NATIVE_TOOLS[name]["id"], action_version=1, status="RUNNING",
            parent_execution_id=self.pending.execution_id, root_execution_id=self.pending.root_execution_id,
            call_sequence=sequence, depth=self.pending.depth + 1, client_id=self.scope.principal.client_id,
            event={"eventType": "action.invoked", "data": input, "recordType": None, "recordId": None},
            input=input, started_at=now(), action_name=name, action_kind=name, parent_attempt=self.pending.attempt,
        )
        self.tree.pending.append(child)
        return child

    def graphql(self, document: str, variables: dict | None, operation_name: str | None, check: bool) -> Any:
        # With check=True a failure fails the calling tool (a program cannot catch it), whose own savepoint
        # then rolls back everything its graphql() did: a savepoint of its own (two round trips) is needed
        # only when the program goes on after a failure (check=False). The check=True branch runs the
        # document as `execute_graphql` does, without its frame.
        sequence, child_id = self._next_child()
        input = {"document": document, "variables": variables, "operationName": operation_name}
        child = self._native_child("graphql", input, sequence, child_id)
        graphql_scope = self._graphql_scope()
        errors = None
        try:
            try:
                if check:
                    data, errors = graphql_scope.services.graphql(graphql_scope, document, variables, operation_name)
                    if errors:
                        raise CallFailed(*graphql_failure(errors))
                else:
                    with self.scope.savepoint():
                        data, errors = execute_graphql(graphql_scope, document, variables, operation_name)
                        if errors:
                            raise CallFailed(*graphql_failure(errors))
            except Retryable:
                if time.monotonic() < self.deadline - 0.1:
                    raise  # a lost race or the request's own deadline: the whole request retries
                # The statement ran into this tool's responseTimeout (statement_timeout), not the request's.
                raise CallFailed("action_response_timeout", "the tool's database work ran past its responseTimeout",
                                 "make the tool do less per call, or raise its responseTimeout") from None
        except CallFailed as failed:
            child.status = "FAILED"
            child.error = {"code": failed.code, "message": failed.message, "hint": failed.hint}
            output = child.output = {"data": None, "errors": errors}
            child.built = (child.event, input, output, (document, variables, operation_name, errors))
            child.finished_at = now()
            if check:
                raise CallFailure(failed.code, failed.message, failed.hint) from None
            return {"data": None, "errors": errors}
        child.status = "SUCCEEDED"
        output = child.output = {"data": data, "errors": None}
        child.built = (child.event, input, output, (document, variables, operation_name, data))
        child.finished_at = now()
        return data if check else {"data": data, "errors": None}

    def _graphql_scope(self) -> Scope:
        """The scope every graphql() of this program runs under: the program's, with the native tool's layer.
        A native child adds no tool frame: writes made through it stay attributed to the calling tool. Built
        once per host (a tree of reads asks for it a thousand times); it holds no decision, only the chain."""
        if self._graphql is None:
            self._graphql = replace(self.scope, chain=self.scope.chain.extended(natives.NATIVE_TOOLS["graphql"]["layer"]))
        return self._graphql

    def cel(self, expression: str, variables: dict | None, check: bool) -> Any:
        sequence, child_id = self._next_child()
        child = self._native_child("cel", {"expression": expression, "vars": variables}, sequence, child_id)
        try:
            value = evaluate_expression(expression, variables or {})
        except CelError as exc:
            child.finished_at = now()
            child.status = "FAILED"
            child.error = {"code": "cel_error", "message": exc.message, "hint": exc.hint}
            if check:
                raise CallFailure("cel_error", exc.message, exc.hint) from None
            return {"status": "FAILED", "error": child.error, "executionId": str(child_id)}
        child.finished_at = now()
        child.status = "SUCCEEDED"
        child.output = {"value": value}
        if check:
            return value
        # The same shape as a failure, so that a program can test r["status"] (as with tools.x).
        return {"status": "SUCCEEDED", "output": child.output, "executionId": str(child_id)}

    def _refused_child(self, target: dict, input: Any, sequence: int, child_id: uuid.UUID,
                       failed: "CallFailed") -> PendingExecution:
        """A call that fails before its program runs (its fixed input could not be resolved)."""
        child = PendingExecution(
            execution_id=child_id, action_id=target["action_id"], action_version=target["version"], status="FAILED",
            parent_execution_id=self.pending.execution_id, root_execution_id=self.pending.root_execution_id,
            call_sequence=sequence, depth=self.pending.depth + 1, client_id=self.scope.principal.client_id,
            event={"eventType": "action.invoked", "data": input, "recordType": None, "recordId": None},
            input=input, started_at=now(), finished_at=now(), action_name=target["name"], action_kind=target["kind"],
            error={"code": failed.code, "message": failed.message, "hint": failed.hint},
            parent_attempt=self.pending.attempt,
        )
        self.tree.pending.append(child)
        return child

    def call_tool(self, name: str, input: Any, check: bool) -> Any:
        target = self.tools.get(name)
        if target is None:
            raise CallFailure("tool_not_declared", f"the program called `tools.{name}`, which its invocation did "
                              "not resolve", "declare the tool in the action's `tools` references")
        sequence, child_id = self._next_child(target, name)
        if admission.refused_version(target) is not None:
            raise CallFailure("action_failure", f"the tool {name!r} is not callable ({target['status']})",
                              "publish or enable the tool it references")
        reference = target.get("reference") or {}
        try:
            input = merge_fixed_input(input, reference.get("input"), self.tree.session, self.pending.event)
        except CallFailed as failed:
            child = self._refused_child(target, input, sequence, child_id, failed)
        else:
            child = self._call(name, target, reference, input, sequence, child_id)
        if child.status == "SUCCEEDED":
            if check:
                return child.output
            return {"status": "SUCCEEDED", "output": child.output, "executionId": str(child_id)}
        if check:
            raise CallFailure(child.error["code"], child.error["message"], child.error.get("hint"))
        return {"status": "FAILED", "error": child.error, "executionId": str(child_id)}

    def _call(self, name: str, target: dict, reference: dict, input: Any, sequence: int,
              child_id: uuid.UUID) -> PendingExecution:
        """The child for a call of `target` with its merged input: a proposal through a confirm reference,
        the call itself otherwise."""
        if reference.get("confirm"):
            if self.propose is None:
                return self._refused_child(target, input, sequence, child_id, CallFailed(
                    "action_not_callable", f"the reference to {name!r} asks for a person's confirmation, which only "
                    "an agent's or an MCP server's tools can ask for", "remove confirm from this tool's reference"))
            return self.propose(self.scope, self.tree, self.pending, target, reference, input, sequence=sequence,
                                execution_id=child_id, deadline=self.deadline, run_call=self.run_call)
        child = self.run_call(self.scope, self.tree, target, input, execution_id=child_id,
                              parent_execution_id=self.pending.execution_id,
                              root_execution_id=self.pending.root_execution_id, call_sequence=sequence,
                              depth=self.pending.depth + 1, deadline=self.deadline,
                              parent_attempt=self.pending.attempt)
        if (child.status == "FAILED" and child.error["code"] == "action_input_invalid"
                and reference.get("input") and reference.get("actionVersion") is None):
            child.error["hint"] = (f"the reference to {reference.get('name')!r} has no version, and version "
                                   f"{target['version']} does not accept its fixed input: pin a version that "
                                   "accepts the fixed input, or change the fixed input")
        return child
