"""invokeAction: run a tool synchronously inside the caller's transaction."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

import psycopg

from ..actions import natives
from ..actions.registry import action_of_row, action_statement, load_action
from ..errors import LedgerError, Retryable
from ..policy.chain import Layer
from ..scope import Scope
from ..values import require_storable_input, same_json
from . import admission, sessions
from .admission import ActionNotCallable
from .engine import CallBody, run_call
from .failures import CallFailed
from .fixed_input import merge_fixed_input
from .tree import TREE_KEY, CallTree, response_timeout_seconds
from .records import (EXECUTION, PendingExecution, execution_document, flush, lock_and_load_execution, record_of,
                      require_new_execution)


class ExecutionIdConflict(LedgerError):
    code = "execution_id_conflict"


def with_fixed_input(supplied: Any, fixed: Any, event_type: str) -> Any:
    """A reference's fixed input merged over what its caller supplied (DESIGN 6); a `$cel` value that
    cannot be evaluated is `action_input_invalid`, before anything runs."""
    try:
        return merge_fixed_input(supplied, fixed, None, {"eventType": event_type, "data": supplied,
                                                         "recordType": None, "recordId": None})
    except CallFailed as failed:
        raise LedgerError(failed.message, code=failed.code, hint=failed.hint) from None


def invoke_action(scope: Scope, action_id: uuid.UUID, execution_id: uuid.UUID, version: int | None, input: Any,
                  session_id: uuid.UUID | None, *, layer: Layer | None = None, event_type: str = "action.invoked",
                  mcp_server_id: uuid.UUID | None = None, body: CallBody | None = None,
                  output_schema: dict | None = None, loaded: dict | None = None,
                  layered_scope: Scope | None = None) -> dict:
    """`layer`: one more layer between the caller's and the tools' (an MCP server's). It narrows the
    action's SELECT and INVOKE and everything the call does; the caller's own records of the call
    (the execution, the session) stay the caller's to authorize, so a server that allows no writes
    still lets its read tools be called and recorded. `layered_scope`: `scope` with its chain extended
    by `layer`, when the caller has built that scope already (an MCP call lists its tools under it):
    `dataclasses.replace` walks every field of a Scope again.

    `body`: what a native acting for the server's caller (`invoke`, `program`, ...) does; only such
    a call may run one of those natives. `output_schema`: what the body's output is checked against
    instead of the tool's (a call that proposes answers the planned result, DESIGN 14).

    `loaded`: the action's record at `version` (`load_action`), when the caller has already read it in
    this transaction (an MCP server resolves it to list the tool): it is not read again."""
    require_storable_input(input)
    tree: CallTree | None = scope.request_state.get(TREE_KEY)
    if tree is not None:
        # A nested invokeAction through graphql(): admitted (re-entry, depth, count) before anything else,
        # so that a refused call neither waits on the executionId's lock nor answers as a repeat.
        record = loaded if loaded is not None else load_action(scope, action_id, version)
        if record is not None:
            admission.admit(tree, record, record["name"])
    existing, loaded = _locked_execution(scope, execution_id, action_id, version, loaded)
    if existing is not None:
        return _repeat(scope, existing, action_id, version, input)
    if tree is not None:
        # Executions of the running call tree are recorded only when it finishes: look there too, or a
        # repeat inside one request would run again and then collide with itself when the tree is written.
        earlier = next((p for p in tree.pending if p.execution_id == execution_id), None)
        if earlier is not None:
            return _repeat_within_tree(scope, earlier, action_id, version, input)
    call_scope = scope if layer is None else (
        layered_scope if layered_scope is not None else replace(scope, chain=scope.chain.extended(layer)))
    record = admission.invocable_record(call_scope, action_id, version, acting_for_caller=body is not None,
                                        loaded=loaded)
    if output_schema is not None:
        record = {**record, "tool": {**record["tool"], "outputSchema": output_schema}}
    session = None
    if session_id is not None and not record["tool"].get("session"):
        raise ActionNotCallable(f"{record['name']!r} has no sessions", hint="omit sessionId")
    require_new_execution(scope, execution_id, action_id, record["version"], status="RUNNING", started=False)

    if record["tool"].get("session"):
        sessions.require_session_grants(scope)
        session = sessions.find_or_create(scope, action_id, session_id, input)

    own_tree = tree is None
    if own_tree:
        tree = CallTree(scope)
        if session is not None:
            tree.session = {"id": str(session["id"]), "input": session["input"]}
        scope.request_state[TREE_KEY] = tree
    parent = scope.writing_execution_id if not own_tree else None
    parent_attempt = enclosing = None
    if parent is not None:
        # A nested invokeAction is a call of the tool running it, made by that tool's attempt, inside the
        # innermost call still running (the graphql() call that sent it).
        parent_attempt = next((p.attempt for p in reversed(tree.pending) if p.execution_id == parent), 1)
        enclosing = next((p.execution_id for p in reversed(tree.pending) if p.status == "RUNNING"), None)
    try:
        started = time.monotonic()
        pending = run_call(call_scope, tree, record, input, execution_id=execution_id, parent_execution_id=parent,
                           root_execution_id=execution_id if own_tree else tree.pending[0].root_execution_id,
                           call_sequence=None, depth=0 if own_tree else len(tree.stack),
                           deadline=scope.deadline if own_tree or not tree.deadlines else tree.deadlines[-1],
                           session_id=session["id"] if session else None, parent_attempt=parent_attempt,
                           event_type=event_type, body=body)
        pending.enclosing_execution_id = enclosing
        pending.mcp_server_id = mcp_server_id
    finally:
        if own_tree:
            scope.request_state.pop(TREE_KEY, None)
            tree.close()
    if not own_tree:
        return pending.as_record(scope.one("SELECT now() AS now")["now"], scope.trigger_depth)
    # A turn that called a model is recorded whatever cut it (DESIGN 13: a deadline passed during a model
    # call is the turn's `action_response_timeout`): its tokens are spent, and a repeat must not run it again.
    if not tree.model_called and _cut_by_the_request_deadline(scope, record, pending, started):
        # Not the tool's responseTimeout but the request's deadline stopped it: recording a FAILED
        # execution would make every repeat of this executionId fail; nothing is recorded instead.
        raise Retryable("the request's deadline passed before the call finished",
                        hint=f"retry with a longer Request-Timeout: the call may take up to its responseTimeout "
                             f"of {response_timeout_seconds(record):g} s")
    if session is not None:
        # An agent's turn keeps its final answer beside its input: the session's next turns see both.
        answer = pending.output if record["kind"] == "agent" and pending.status == "SUCCEEDED" else None
        sessions.record_input(scope, session, execution_id, input, answer)
    try:
        created_at = flush(scope, tree.pending)
    except psycopg.errors.UniqueViolation as exc:
        taken = _derived_id_taken(scope, execution_id, tree.pending)
        if taken is not None:
            # A retry would derive the same id again and meet the same row: not `retryable`.
            raise ExecutionIdConflict(
                f"a call this execution made was given executionId {taken}, which an existing execution holds",
                hint="call again with a new executionId: the ids of the calls it makes derive from it",
            ) from exc
        retry = Retryable("another request recorded this executionId at the same time",
                          hint="retry: the repeat returns the recorded execution")
        retry.race = True
        raise retry from exc
    return pending.as_record(created_at, scope.trigger_depth)


def _locked_execution(scope: Scope, execution_id: uuid.UUID, action_id: uuid.UUID, version: int | None,
                      loaded: dict | None) -> tuple[dict | None, dict | None]:
    """The executionId's lock, then its execution (None when unused) and the action at `version` (as
    `load_action`; `loaded` when the caller read it already), in one statement: the action is read
    beside the lookup even when the execution exists, since a repeat is rare and a round trip is not."""
    if loaded is not None or natives.NATIVE_BY_ID.get(action_id) is not None:
        existing, _ = lock_and_load_execution(scope, execution_id)
        return existing, loaded
    existing, action_row = lock_and_load_execution(scope, execution_id, action_statement(scope, action_id, version))
    return existing, action_of_row(action_row)


def _derived_id_taken(scope: Scope, execution_id: uuid.UUID, pending: list[PendingExecution]) -> uuid.UUID | None:
    """After the tree's rows met existing ones: a child id the server derived that an older row holds.

    The request's transaction is aborted, and PostgreSQL names no key in the error of a table under row
    level security, so a short transaction of its own looks. When the call's own executionId is recorded
    now, a concurrent request with it won (a race: the retry returns that record). Otherwise a derived
    id held by an existing row is met again by every retry.
    """
    derived = [p.execution_id for p in pending[1:] if p.call_sequence is not None]
    if not derived:
        return None
    with scope.services.db.transaction(scope.tenant_id, deadline=scope.deadline) as conn:
        rows = conn.execute("SELECT id FROM executions WHERE tenant_id = %s AND id = ANY(%s)",
                            (scope.tenant_id, [execution_id, *derived])).fetchall()
    held = {row["id"] for row in rows}
    if execution_id in held:
        return None
    return next((child for child in derived if child in held), None)


def _cut_by_the_request_deadline(scope: Scope, record: dict, pending: PendingExecution, started: float) -> bool:
    """Whether a call failed on time because the request's deadline passed before its own responseTimeout."""
    if pending.status != "FAILED" or pending.error["code"] != "action_response_timeout":
        return False
    now = time.monotonic()
    return now >= scope.deadline and now - started < response_timeout_seconds(record)


def _repeat(scope: Scope, existing: dict, action_id: uuid.UUID, version: int | None, input: Any) -> dict:
    """The recorded execution for a repeated executionId, or a conflict when it was used for another call."""
    scope.require("SELECT", EXECUTION, execution_document(existing))
    same_version = version is None or version == existing["action_version"]
    if existing["action_id"] != action_id or not same_version or not same_json(existing["input"], input):
        raise ExecutionIdConflict(
            f"executionId {existing['id']} was already used for another call",
            hint="use a new executionId for a new call; repeat a call only with the same action and input",
        )
    return record_of(existing)


def _repeat_within_tree(scope: Scope, earlier: PendingExecution, action_id: uuid.UUID, version: int | None,
                        input: Any) -> dict:
    """A nested invokeAction repeating an executionId that the running call tree already used."""
    row = {"tenant_id": scope.tenant_id, "id": earlier.execution_id, "action_id": earlier.action_id,
           "action_version": earlier.action_version, "status": earlier.status,
           "parent_execution_id": earlier.parent_execution_id, "root_execution_id": earlier.root_execution_id,
           "depth": earlier.depth, "client_id": earlier.client_id, "session_id": earlier.session_id, "started": False}
    scope.require("SELECT", EXECUTION, execution_document(row))
    if earlier.status == "RUNNING":
        raise ExecutionIdConflict(f"executionId {earlier.execution_id} belongs to a call that is still running",
                                  hint="use a new executionId for a new call")
    same_version = version is None or version == earlier.action_version
    if earlier.action_id != action_id or not same_version or not same_json(earlier.input, input):
        raise ExecutionIdConflict(
            f"executionId {earlier.execution_id} was already used for another call",
            hint="use a new executionId for a new call; repeat a call only with the same action and input",
        )
    return earlier.as_record(scope.one("SELECT now() AS now")["now"], scope.trigger_depth)
