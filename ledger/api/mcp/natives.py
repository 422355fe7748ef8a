"""What the natives an MCP server can list do when its caller calls them (DESIGN 12): `invoke`,
`get_task`, `cancel_task` and `program` ("code mode").

Each call of one is an execution like any other (tools/call records it, with the event
`mcp.tools_call` and the server's id), run under the caller's layer and the server's. None adds a tool
level or a layer of its own: the calls it makes are its children, under the same chain, with ids the
ledger derives from its id (section 17). A failure here is the native call's failure (`CallFailure`),
so that it is recorded and answered as an `isError` result.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from functools import partial
from typing import Any, Callable

import psycopg

from ...actions import natives
from ...actions.mcp_servers import McpServer
from ...actions.registry import ACTION, as_document, load_action
from ...errors import LedgerError, Retryable
from ...executions import admission
from ...executions.admission import callable_record
from ...executions.engine import CallBody, CallTree, run_call
from ...executions.host import ToolHost
from ...executions.invoke import with_fixed_input
from ...executions.plan_records import PLAN, load_plan
from ...executions.planned import Proposer, propose
from ...executions.previews import rolled_back
from ...executions.records import EXECUTION, PendingExecution, execution_document, invocations_of, load_execution
from ...queue.start import cancel_execution, start_action
from ...runtime import CallFailure, Program
from ...scope import Scope, ToolFrame
from .tools import ListedTool, listed_tools

POLL_INTERVAL_MS = 1000
TASK_STATUS = {"QUEUED": "working", "RUNNING": "working", "SUCCEEDED": "completed", "FAILED": "failed",
               "CANCELLED": "cancelled"}
# graphql() and cel() exist in a program only when the server lists these natives.
PROGRAM_NATIVES = ("graphql", "cel")


def native_body(tool: ListedTool, server: McpServer) -> CallBody | None:
    """What calling `tool` does when it is one of the natives that act for the server; None otherwise."""
    record = tool.record
    if not record["native"] or record["name"] not in natives.SERVER_NATIVES:
        return None
    bodies: dict[str, Callable[..., Any]] = {"invoke": _invoke, "get_task": _get_task, "cancel_task": _cancel_task,
                                            "program": _program}
    return partial(_as_call, bodies[record["name"]], server)


def _as_call(body: Callable[..., Any], server: McpServer, scope: Scope, tree: CallTree, pending: PendingExecution,
             deadline: float) -> Any:
    """A refusal met on the way (a denial, an uncallable tool) fails the native call, on the record.

    The scope's chain is the caller's layer and the server's: what it lists is what this caller may call
    through the server, and so all that invoke and program reach."""
    try:
        return body(scope, tree, pending, deadline, server)
    except Retryable:
        raise
    except LedgerError as refused:
        code = "action_permission_denied" if refused.code == "permission_denied" else refused.code
        raise CallFailure(code, refused.message, refused.hint) from None


def _callable_tools(listed: list[ListedTool]) -> list[ListedTool]:
    """The listed tools that invoke and program reach: everything but the natives acting for the server."""
    return [t for t in listed if not (t.record["native"] and t.record["name"] in natives.SERVER_NATIVES)]


# ---------------------------------------------------------------------------- invoke


def _invoke(scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float,
            server: McpServer) -> Any:
    listed = listed_tools(scope, server)
    args = pending.input
    preview, start = args.get("preview") is True, args.get("start") is True
    if preview and start:
        raise CallFailure("action_input_invalid", "invoke cannot both preview a tool and start it",
                          "preview it first, then call invoke again with start: true")
    target = _target(args["tool"], listed, server)
    version = _version(target, args.get("version"), server)
    record = target.record if version in (None, target.record["version"]) else load_action(
        scope, target.record["action_id"], version)
    if record is not None and record is not target.record:
        # Another version than the listed one: it must pass the caller's and the server's layers too.
        scope.require("SELECT", ACTION, as_document(record))
        scope.require("INVOKE", ACTION, as_document(record))
    record = callable_record(scope, target.record["action_id"], version, record)
    if record["tool"].get("session"):
        raise CallFailure("action_not_callable", f"{target.name!r} has sessions, which invoke does not keep",
                          f"call {target.name!r} itself (tools/call), which finds or creates its session")
    input = with_fixed_input(args.get("input") or {}, target.fixed, "mcp.tools_call")
    child_id = scope.services.execution_ids.child(pending.execution_id, pending.attempt, 1)
    if target.confirm:
        # Called, previewed or started: a confirm reference always answers the planned result (DESIGN 14).
        return _proposed(scope, tree, pending, record, target.reference, input, child_id, deadline, server)
    if start:
        started = start_action(scope, record["action_id"], child_id, record["version"], input, None,
                               started_by=pending.execution_id, mcp_server_id=server.id)
        return {"taskId": str(started["execution_id"]), "status": TASK_STATUS[started["status"]]}
    try:  # a native adds no tool level: only the call is counted
        admission.count_call(tree)
    except admission.CallRefused as refused:
        raise CallFailure(refused.code, refused.message, refused.hint) from None
    call = partial(run_call, scope, tree, record, input, execution_id=child_id,
                   parent_execution_id=pending.execution_id, root_execution_id=pending.root_execution_id,
                   call_sequence=1, depth=pending.depth + 1, deadline=deadline, parent_attempt=pending.attempt)
    if not preview:
        child = call()
        if child.status != "SUCCEEDED":
            raise CallFailure(child.error["code"], child.error["message"], child.error.get("hint"))
        return child.output
    return rolled_back(scope, tree, call)


def _proposed(scope: Scope, tree: CallTree, pending: PendingExecution, record: dict, reference: dict, input: Any,
              child_id: uuid.UUID, deadline: float, server: McpServer) -> dict:
    """A call through a confirm reference, as call number 1 of `pending`: the planned result."""
    try:
        admission.admit(tree, record, record["name"])
    except admission.CallRefused as refused:
        raise CallFailure(refused.code, refused.message, refused.hint) from None
    proposal = propose(scope, tree, pending, record, reference, input, proposer=Proposer(mcp_server_id=server.id),
                       sequence=1, execution_id=child_id, deadline=deadline, run_call=run_call)
    if proposal.status != "SUCCEEDED":
        raise CallFailure(proposal.error["code"], proposal.error["message"], proposal.error.get("hint"))
    return proposal.output


def proposal_body(tool: ListedTool, server: McpServer) -> CallBody:
    """What a tools/call of a confirm reference does: it proposes the call, as its child (DESIGN 14)."""

    def body(scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float) -> Any:
        child_id = scope.services.execution_ids.child(pending.execution_id, pending.attempt, 1)
        return _proposed(scope, tree, pending, tool.record, tool.reference, pending.input, child_id, deadline, server)

    return body


def _target(name: str, listed: list[ListedTool], server: McpServer) -> ListedTool:
    tools = _callable_tools(listed)
    target = next((t for t in tools if t.name == name), None)
    if target is not None:
        return target
    names = ", ".join(t.name for t in tools) or "none"
    raise CallFailure("not_found", f"MCP server {server.name!r} lists no tool {name!r} that this caller may call",
                      f"invoke one of: {names}")


def _version(target: ListedTool, asked: int | None, server: McpServer) -> int | None:
    """The version to run: the reference's pin, which `asked` must equal; a reference that follows the
    latest version runs any version asked for."""
    pin = target.pinned_version
    if asked is None or pin is None:
        return pin if asked is None else asked
    if asked != pin:
        raise CallFailure("action_not_callable",
                          f"MCP server {server.name!r} lists {target.name!r} at version {pin}, not {asked}",
                          f"omit version, or ask for version {pin}")
    return pin


# ---------------------------------------------------------------------------- tasks


def _task(scope: Scope, task_id: uuid.UUID, server: McpServer) -> dict:
    """The task `task_id`: only one started through this server by this client."""
    row = load_execution(scope, task_id)
    if (row is None or not row["started"] or row["mcp_server_id"] != server.id
            or row["client_id"] != scope.principal.client_id):
        raise CallFailure("not_found", f"no task {task_id} was started through MCP server {server.name!r} by this "
                                       "client", "use a taskId that invoke with start: true returned to you")
    scope.require("SELECT", EXECUTION, execution_document(row))
    return row


def _task_answer(scope: Scope, row: dict, *, cancel_requested: bool = False) -> dict:
    status = row["status"]
    invocations = invocations_of(scope, row["id"])
    latest = invocations[-1] if invocations else {}
    error = latest.get("error") if status in ("FAILED", "CANCELLED") else None
    if status == "QUEUED":
        message = "queued"
        if row["attempts"] and latest.get("error"):
            failed = latest["error"]
            message = (f"queued for attempt {row['attempts'] + 1}; attempt {row['attempts']} failed: "
                       f"{failed['code']}: {failed['message']}")
    elif status == "RUNNING":
        message = f"running (attempt {row['attempts']})"
        if cancel_requested:
            message += "; cancel requested: it stops at its next check and rolls its writes back"
    elif status == "FAILED" and error:
        message = f"{error['code']}: {error['message']}"
    else:
        message = TASK_STATUS[status]
    return {"taskId": str(row["id"]), "status": TASK_STATUS[status], "statusMessage": message,
            "output": latest.get("output") if status == "SUCCEEDED" else None, "error": error,
            "pollIntervalMs": POLL_INTERVAL_MS}


def _plan(scope: Scope, pending: PendingExecution, server: McpServer) -> dict | None:
    """The planned action named by the call's taskId, when it is one proposed through this server by this
    client (DESIGN 14); None otherwise."""
    plan = load_plan(scope, _task_id(pending))
    if plan is None or plan["mcp_server_id"] != server.id or plan["client_id"] != scope.principal.client_id:
        return None
    scope.require("SELECT", PLAN, plan)
    return plan


def _plan_answer(scope: Scope, plan: dict) -> dict:
    """A plan as a task: working while PROPOSED, cancelled once rejected or expired, then its execution."""
    status = plan["status"]
    if status == "CONFIRMED":
        row = load_execution(scope, plan["execution_id"])
        scope.require("SELECT", EXECUTION, execution_document(row))
        answer = _task_answer(scope, row)
        answer["statusMessage"] = f"confirmed; {answer['statusMessage']}"
        return {**answer, "taskId": str(plan["id"])}
    if status == "PROPOSED":
        message = f"waiting for a person to confirm or reject it; it expires at {plan['expires_at'].isoformat()}"
    elif status == "REJECTED":
        message = f"rejected: {plan['reason']}" if plan["reason"] else "rejected"
    else:
        message = "expired: nobody confirmed it within 24 hours"
    return {"taskId": str(plan["id"]), "status": "working" if status == "PROPOSED" else "cancelled",
            "statusMessage": message, "output": None, "error": None, "pollIntervalMs": POLL_INTERVAL_MS}


def _get_task(scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float,
              server: McpServer) -> dict:
    plan = _plan(scope, pending, server)
    if plan is not None:
        return _plan_answer(scope, plan)
    return _task_answer(scope, _task(scope, _task_id(pending), server))


def _cancel_task(scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float,
                 server: McpServer) -> dict:
    plan = _plan(scope, pending, server)
    if plan is not None and plan["status"] != "CONFIRMED":
        raise CallFailure("start_not_allowed", "a planned action is decided by a person, not cancelled by its "
                          "proposer", "leave it: a person rejects it, or it expires unconfirmed after 24 hours")
    # A confirmed plan's task is its run.
    row = _task(scope, plan["execution_id"] if plan is not None else _task_id(pending), server)
    cancelled = cancel_execution(scope, row["id"])
    row = {**row, "status": cancelled["status"]}
    answer = _task_answer(scope, row, cancel_requested=cancelled["status"] == "RUNNING")
    return answer if plan is None else {**answer, "taskId": str(plan["id"])}


def _task_id(pending: PendingExecution) -> uuid.UUID:
    return uuid.UUID(pending.input["taskId"])


# ---------------------------------------------------------------------------- program


def _program(scope: Scope, tree: CallTree, pending: PendingExecution, deadline: float,
             server: McpServer) -> dict:
    listed = listed_tools(scope, server)
    args = pending.input
    preview = args.get("preview") is True
    source = args["src"]
    # Only the natives themselves give graphql() and cel(); an action of kind graphql is a tool like any other.
    tools = {t.name: {**t.record, "reference": t.reference} for t in listed if not t.record["native"]}
    given = tuple(name for name in PROGRAM_NATIVES
                  if any(t.record["native"] and t.record["name"] == name for t in listed))
    pending.tools = [{"name": name, "actionId": str(r["action_id"]), "actionVersion": r["version"]}
                     for name, r in tools.items()]
    program = Program(key=("mcp program", str(scope.tenant_id), hashlib.sha256(source.encode()).hexdigest()),
                      source=source, tool_names=tuple(sorted(tools)), code_mode=True, natives=given)
    executor = tree.executor()
    problems = executor.compile(source, program.tool_names, max(0.1, deadline - time.monotonic()), program=program)
    if problems:
        first = problems[0]
        raise CallFailure("action_failure", f"the program does not compile: line {first['line']}, column "
                                            f"{first['column']}: {first['message']}",
                          "fix the program there and call program again; run() takes no argument, and each tool "
                          "is tools.<name>(property = value, ...)")
    # The program is the writing execution of what it does through graphql(), and no layer of its own.
    frame = ToolFrame(natives.PROGRAM_ID, 1, "program", pending.execution_id)
    # The program is no tool level: its calls are admitted beneath the tools on the stack, which it is not on.
    host = ToolHost(scope.within_tool(frame, scope.chain), tree, pending, tools, deadline, run_call,
                    propose=partial(propose, proposer=Proposer(mcp_server_id=server.id)))
    first = len(tree.pending)
    if not preview:
        value = _run(executor, program, pending, host, deadline)
        return {"value": value, "logs": pending.logs}
    with scope.savepoint():
        value = _run(executor, program, pending, host, deadline)
        raise psycopg.Rollback()
    for kept in tree.pending[first:]:
        kept.rolled_back = True
    return {"value": value, "logs": pending.logs, "preview": True}


def _run(executor: Any, program: Program, pending: PendingExecution, host: ToolHost, deadline: float) -> Any:
    outcome = executor.run(program, pending.event, host, deadline)
    pending.logs = outcome.logs
    if not outcome.ok:
        raise CallFailure(outcome.error_code or "action_failure", outcome.error_message or "the program failed",
                          outcome.error_hint)
    return outcome.output
