"""tools/list and tools/call on a worker thread: each one ledger request, in one transaction, retried by
the server on a lost race like a GraphQL request (DESIGN 3 and 12).

A JSON-RPC error and a call refused before it ran roll the transaction back; a call that ran commits
its record, FAILED included. A preview (`_meta["ledger/preview"]: true`) runs and rolls back.

The first attempt runs in the transaction the route opened (it read the client and the record there);
a retry opens a new one.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ...actions.mcp_servers import McpServer, server_layer
from ...auth.clients import client_layer
from ...errors import LedgerError, Retryable
from ...executions import records
from ...executions.invoke import invoke_action, with_fixed_input
from ...executions.tree import model_was_called, not_rerun_hint
from ...executions.planned import PLANNED_RESULT_SCHEMA
from ...policy.chain import Chain, Layer
from ...policy.principal import Principal
from ...queue.triggers import TRIGGERS_VERSION_COLUMN, remember_version
from ...scope import Scope
from ...services import Services
from ...db.retry import retry_lost_races
from ..requests import HeldTransaction
from .natives import native_body, proposal_body
from .tools import (EXECUTION_ID, PREVIEW, SESSION_ID, ListedTool, Preloaded, describe, failed, iter_listed_tools,
                    listed_tools, succeeded, uuid_of_text)

EVENT_TYPE = "mcp.tools_call"
# A JSON-RPC error of the implementation-defined range: the ledger could not answer for now.
RETRYABLE_ERROR = -32000


@dataclass(frozen=True)
class Caller:
    """Who calls which server: resolved by the route before the SDK takes the request over."""

    principal: Principal
    policies: list[dict]
    server: McpServer
    deadline: float
    # The request's transaction, in which the route read the client and the server: the first attempt's.
    opened: HeldTransaction
    # The rows of the server's actions, read with the server's in `opened` (`server_and_tools_of_row`): valid in
    # that transaction only.
    tool_rows: Preloaded = field(default_factory=dict)
    # The caller's layer as the route built it for the opening's scope (a pure function of the principal and
    # its policies, which a retry reuses too): built once a request, not once a step.
    layer: Layer | None = None

    def client_layer(self) -> Layer:
        return self.layer if self.layer is not None else client_layer(self.principal, self.policies)


class _RollBack(Exception):
    """Leaves the transaction (rolling it back) with an answer: a listing, a preview, or a call the ledger
    refused before running it."""

    def __init__(self, result: Any) -> None:
        self.result = result


class McpCalls:
    def __init__(self, services: Services) -> None:
        self.services = services

    @contextlib.contextmanager
    def _transaction(self, caller: Caller) -> Iterator[tuple[Any, int | None, Preloaded | None]]:
        """An attempt's transaction, its tenant's trigger version (for the events a call raises, read
        with BEGIN) and the rows of the server's actions read in it already: the route's for the first
        attempt, a new one (none read) for a retry. It commits unless the block raises (`_RollBack`
        included)."""
        opened = caller.opened.take()
        if opened is not None:
            with opened.use() as request:
                yield request.conn, request.triggers_version, caller.tool_rows
        else:
            with self.services.db.transaction(caller.principal.tenant_id, deadline=caller.deadline,
                                              first=[(f"SELECT {TRIGGERS_VERSION_COLUMN}", None)]) as conn:
                yield conn, conn.ledger_first[0]["triggers_version"], None

    def _scope(self, conn, caller: Caller, triggers_version: int | None, chain: Chain, *, dry_run: bool = False,
               request_state: dict | None = None) -> Scope:
        """An attempt's scope under `chain`: the caller's layer, or the caller's and the server's (a listing's,
        built as the other is rather than derived from it: `dataclasses.replace` walks every field)."""
        scope = Scope(conn=conn, principal=caller.principal, chain=chain, services=self.services,
                      deadline=caller.deadline, dry_run=dry_run,
                      request_state={} if request_state is None else request_state)
        remember_version(scope, triggers_version)
        return scope

    # ------------------------------------------------------------------ tools/list

    def list_tools(self, caller: Caller) -> types.ListToolsResult:
        client, server = caller.client_layer(), server_layer(caller.server)

        def once() -> list[types.Tool]:
            try:
                with self._transaction(caller) as (conn, triggers_version, preloaded):
                    listing = self._scope(conn, caller, triggers_version, Chain((client, server)))
                    raise _RollBack([describe(tool, client, server)
                                     for tool in listed_tools(listing, caller.server, preloaded)])
            except _RollBack as read:
                return read.result

        try:
            return types.ListToolsResult(tools=retry_lost_races(once, retries=self.services.settings.race_retries,
                                                                 deadline=caller.deadline))
        except Retryable as exc:
            raise _retryable_error(exc) from None

    # ------------------------------------------------------------------ tools/call

    def call_tool(self, caller: Caller, params: types.CallToolRequestParams) -> types.CallToolResult:
        request_meta = dict(params.meta or {})
        preview = request_meta.get(PREVIEW) is True
        answer_meta: dict[str, Any] = {PREVIEW: True} if preview else {}
        try:
            given = _uuid_meta(request_meta, EXECUTION_ID)
            session_id = _uuid_meta(request_meta, SESSION_ID)
        except LedgerError as exc:
            return failed(exc.code, exc.message, exc.hint, answer_meta)
        execution_id = given or uuid.uuid4()
        answer_meta[EXECUTION_ID] = str(execution_id)

        attempts: list[dict] = []
        client, server = caller.client_layer(), server_layer(caller.server)

        def once() -> types.CallToolResult:
            attempts.append({})  # the attempt's request_state: whether it called a model
            try:
                with self._transaction(caller) as (conn, triggers_version, preloaded):
                    # The attempt's request_state, so that it also holds the trigger version read with BEGIN.
                    scope = self._scope(conn, caller, triggers_version, Chain((client,)), dry_run=preview,
                                        request_state=attempts[-1])
                    listing = self._scope(conn, caller, triggers_version, Chain((client, server)), dry_run=preview,
                                          request_state=attempts[-1])
                    result = self._call_once(scope, listing, server, caller, params, execution_id, session_id,
                                             answer_meta, preloaded)
                    if preview:
                        raise _RollBack(result)
                    return result
            except _RollBack as rolled_back:
                return rolled_back.result

        try:
            # A call that reached a model (an agent) is never run again (DESIGN 13).
            return retry_lost_races(once, retries=self.services.settings.race_retries, deadline=caller.deadline,
                                    may_retry=lambda: not model_was_called(attempts[-1]))
        except Retryable as exc:
            # Transient failures are the runtime's to retry, not the model's: still one isError result.
            hint = not_rerun_hint(exc.hint) if model_was_called(attempts[-1]) else exc.hint
            return failed("retryable", exc.message, hint, answer_meta)

    def _call_once(self, scope: Scope, listing: Scope, server: Layer, caller: Caller,
                   params: types.CallToolRequestParams, execution_id: uuid.UUID, session_id: uuid.UUID | None,
                   meta: dict, preloaded: Preloaded | None) -> types.CallToolResult:
        """`listing`: the scope under the caller's and the server's layers (`server`) that lists its tools."""
        tools: list[ListedTool] = []
        for listed in iter_listed_tools(listing, caller.server, preloaded):
            tools.append(listed)
            if listed.name == params.name:
                break
        tool = tools[-1] if tools and tools[-1].name == params.name else None
        if tool is None:
            callable_names = ", ".join(t.name for t in tools) or "none"
            raise MCPError(INVALID_PARAMS, f"no tool {params.name!r} that this caller may call on MCP server "
                                           f"{caller.server.name!r}; the tools it may call: {callable_names}")
        try:
            input = with_fixed_input(params.arguments or {}, tool.fixed, EVENT_TYPE)
            # A confirm reference proposes the call instead of making it (DESIGN 14).
            body, output_schema = ((proposal_body(tool, caller.server), PLANNED_RESULT_SCHEMA) if tool.confirm
                                   else (native_body(tool, caller.server), None))
            record = invoke_action(scope, tool.record["action_id"], execution_id, tool.pinned_version, input,
                                   session_id, layer=server, event_type=EVENT_TYPE, mcp_server_id=caller.server.id,
                                   body=body, output_schema=output_schema, loaded=tool.record, layered_scope=listing)
        except Retryable:
            raise
        except LedgerError as refused:
            raise _RollBack(failed(refused.code, refused.message, refused.hint, meta)) from None
        return _result(scope, tool, record, meta)


def _result(scope: Scope, tool: ListedTool, record: dict, meta: dict) -> types.CallToolResult:
    meta = dict(meta)
    if record.get("session_id") is not None:
        meta[SESSION_ID] = str(record["session_id"])
    invocations = record.get("invocations") or records.invocations_of(scope, record["execution_id"])
    latest = invocations[-1] if invocations else {}
    if record["status"] == "SUCCEEDED":
        return succeeded(tool, latest.get("output"), meta)
    if record["status"] == "FAILED":
        error = latest.get("error") or {"code": "action_failure", "message": "the call failed"}
        return failed(error["code"], error["message"], error.get("hint"), meta)
    # A repeat of an executionId that a started execution holds and that has not finished.
    raise _RollBack(failed("execution_id_conflict",
                          f"executionId {record['execution_id']} belongs to an execution that is "
                          f"{record['status']}, not to a call made here",
                          "use a new executionId for a new call", meta))


def _uuid_meta(meta: dict, key: str) -> uuid.UUID | None:
    value = meta.get(key)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError
        return uuid_of_text(value)
    except ValueError:
        raise LedgerError(f"_meta[{key!r}] is not a UUID: {value!r}", code="bad_request",
                          hint=f"send _meta[{key!r}] as a UUID string, or leave it out") from None


def _retryable_error(exc: Retryable) -> MCPError:
    return MCPError(RETRYABLE_ERROR, f"retryable: {exc.message}",
                    {"code": exc.code, "hint": exc.hint, "retryable": True})
