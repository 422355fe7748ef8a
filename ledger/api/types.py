"""GraphQL object types of the contract. Thin: each is built from a service's record."""

from __future__ import annotations

import datetime
import enum
import uuid
from typing import Any, Optional

import strawberry
from strawberry.scalars import JSON

from ..actions import registry
from ..db.paging import clamp_first
from ..domain import accounts
from ..executions import records, sessions
from .context import RequestContext
from .scalars import Int64


def scope_of(info: strawberry.Info) -> Any:
    context: RequestContext = info.context
    return context.scope


# ---------------------------------------------------------------------------- enums


@strawberry.enum
class Effect(enum.Enum):
    ALLOW = "ALLOW"
    DENY = "DENY"


@strawberry.enum
class Operation(enum.Enum):
    SELECT = "SELECT"
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    INVOKE = "INVOKE"


@strawberry.enum
class ActionStatus(enum.Enum):
    UNPUBLISHED = "UNPUBLISHED"
    ACTIVE = "ACTIVE"
    DISABLED = "DISABLED"
    DELETED = "DELETED"


@strawberry.enum
class ActionPending(enum.Enum):
    DISABLE = "DISABLE"
    DELETE = "DELETE"


@strawberry.enum
class ExecutionStatus(enum.Enum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


# ---------------------------------------------------------------------------- viewer & clients


@strawberry.type
class Viewer:
    tenant_id: uuid.UUID
    client_id: uuid.UUID
    client_name: str


@strawberry.type
class PolicyStatement:
    effect: Effect
    actions: list[Operation]
    resources: list[str]
    assertion: Optional[str]

    @classmethod
    def from_json(cls, raw: dict) -> "PolicyStatement":
        return cls(
            effect=Effect(raw["effect"]),
            actions=[Operation(a) for a in raw["actions"]],
            resources=list(raw["resources"]),
            assertion=raw.get("assertion"),
        )


@strawberry.type
class Client:
    id: uuid.UUID
    name: str
    enabled: bool
    policies: list[PolicyStatement]

    @classmethod
    def from_row(cls, row: dict) -> "Client":
        return cls(id=row["id"], name=row["name"], enabled=row["enabled"],
                   policies=[PolicyStatement.from_json(p) for p in row["policies"]])


@strawberry.type
class IssuedToken:
    token: str
    expires_at: Optional[datetime.datetime]


# ---------------------------------------------------------------------------- financial


@strawberry.type
class Transfer:
    id: uuid.UUID
    from_account_id: uuid.UUID
    to_account_id: uuid.UUID
    amount: Int64
    currency: str
    memo: Optional[str]
    execution_id: Optional[uuid.UUID]
    created_at: datetime.datetime

    @classmethod
    def from_row(cls, row: dict) -> "Transfer":
        return cls(id=row["id"], from_account_id=row["from_account_id"], to_account_id=row["to_account_id"],
                   amount=row["amount"], currency=row["currency"], memo=row["memo"],
                   execution_id=row["execution_id"], created_at=row["created_at"])


@strawberry.type
class Account:
    id: uuid.UUID
    name: str
    currency: str
    balance: Int64
    allow_overdraft: bool
    created_at: datetime.datetime

    @strawberry.field
    def transfers(self, info: strawberry.Info, first: Optional[int] = 20) -> list[Transfer]:
        rows = accounts.list_transfers(scope_of(info), self.id, clamp_first(first, 20), None)
        return [Transfer.from_row(r) for r in rows]

    @classmethod
    def from_row(cls, row: dict) -> "Account":
        return cls(id=row["id"], name=row["name"], currency=row["currency"], balance=row["balance"],
                   allow_overdraft=row["allow_overdraft"], created_at=row["created_at"])


# ---------------------------------------------------------------------------- actions


@strawberry.type
class ToolOutput:
    offload: str


@strawberry.type
class ToolBlock:
    name: str
    description: str
    input_schema: JSON
    output_schema: Optional[JSON]
    output: ToolOutput
    response_timeout: Optional[int]
    session: bool

    @classmethod
    def from_json(cls, raw: dict) -> "ToolBlock":
        return cls(
            name=raw["name"], description=raw["description"], input_schema=raw["inputSchema"],
            output_schema=raw.get("outputSchema"),
            output=ToolOutput(offload=(raw.get("output") or {}).get("offload") or "AUTO"),
            response_timeout=raw.get("responseTimeout"), session=bool(raw.get("session")),
        )


@strawberry.type
class ToolReference:
    name: str
    action_id: uuid.UUID
    action_version: Optional[int]
    input: Optional[JSON]
    confirm: bool

    @classmethod
    def from_json(cls, raw: dict) -> "ToolReference":
        return cls(name=raw["name"], action_id=uuid.UUID(str(raw["actionId"])),
                   action_version=raw.get("actionVersion"), input=raw.get("input"),
                   confirm=bool(raw.get("confirm")))

    @strawberry.field
    def action(self, info: strawberry.Info) -> Optional["Action"]:
        record = registry.get_action(scope_of(info), self.action_id, self.action_version)
        return Action.from_record(record) if record else None


@strawberry.type
class Action:
    action_id: uuid.UUID
    version: int
    latest_version: int
    name: str
    description: Optional[str]
    kind: str
    config: Optional[JSON]
    tool: Optional[ToolBlock]
    policies: list[PolicyStatement]
    tools: list[ToolReference]
    status: ActionStatus
    pending: Optional[ActionPending]
    enabled: bool
    native: bool
    created_at: datetime.datetime

    @classmethod
    def from_record(cls, rec: dict) -> "Action":
        return cls(
            action_id=rec["action_id"], version=rec["version"], latest_version=rec["latest_version"],
            name=rec["name"], description=rec.get("description"), kind=rec["kind"], config=rec.get("config"),
            tool=ToolBlock.from_json(rec["tool"]) if rec.get("tool") else None,
            policies=[PolicyStatement.from_json(p) for p in rec.get("policies") or []],
            tools=[ToolReference.from_json(t) for t in rec.get("tools") or []],
            status=ActionStatus(rec["status"]),
            pending=ActionPending(rec["pending"]) if rec.get("pending") else None,
            enabled=rec["enabled"], native=rec["native"], created_at=rec["created_at"],
        )


@strawberry.type
class McpServer:
    id: uuid.UUID
    name: str
    description: Optional[str]
    instructions: Optional[str]
    tools: list[ToolReference]
    policies: list[PolicyStatement]
    enabled: bool
    path: str = strawberry.field(description="Where it is served: /mcp/<name>")
    created_at: datetime.datetime

    @classmethod
    def from_server(cls, server: Any) -> "McpServer":
        return cls(id=server.id, name=server.name, description=server.description,
                   instructions=server.instructions, tools=[ToolReference.from_json(t) for t in server.tools],
                   policies=[PolicyStatement.from_json(p) for p in server.policies], enabled=server.enabled,
                   path=server.path, created_at=server.created_at)


@strawberry.type
class Trigger:
    id: uuid.UUID
    name: str
    event: str
    condition: Optional[str]
    action_id: uuid.UUID
    action_version: Optional[int]
    input: Optional[JSON]
    enabled: bool
    client_id: uuid.UUID = strawberry.field(
        description="Whose authority its runs carry: the client that wrote it last")
    created_at: datetime.datetime

    @classmethod
    def from_trigger(cls, trigger: Any) -> "Trigger":
        return cls(id=trigger.id, name=trigger.name, event=trigger.event, condition=trigger.condition,
                   action_id=trigger.action_id, action_version=trigger.action_version, input=trigger.input,
                   enabled=trigger.enabled, client_id=trigger.client_id, created_at=trigger.created_at)


# ---------------------------------------------------------------------------- executions


@strawberry.type
class StartedBy:
    execution_id: Optional[uuid.UUID]


@strawberry.type
class ExecutionEvent:
    event_type: str
    data: Optional[JSON]
    record_type: Optional[str]
    record_id: Optional[uuid.UUID]


@strawberry.type
class ExecutionError:
    code: str
    message: str
    hint: Optional[str]


@strawberry.type
class ResolvedTool:
    name: str
    action_id: uuid.UUID
    action_version: int


@strawberry.type
class Invocation:
    input: Optional[JSON]
    output: Optional[JSON]
    error: Optional[ExecutionError]
    tools: list[ResolvedTool]
    attempt: int
    started_at: Optional[datetime.datetime]
    finished_at: Optional[datetime.datetime]
    logs: list[str]
    duration_ms: Optional[float] = strawberry.field(
        description="How long the attempt ran, in milliseconds (null while it runs)")
    output_bytes: Optional[int] = strawberry.field(
        description="The size in bytes of the attempt's result JSON: its output, or its error when it has none")
    usage: Optional[JSON] = strawberry.field(
        default=None, description="{inputTokens, outputTokens, modelCalls} of an agent's or model tool's turn; "
                                  "else null")
    _execution_id: strawberry.Private[Optional[uuid.UUID]] = None

    @strawberry.field(description="This attempt's calls, in call order")
    def children(self, info: strawberry.Info) -> list["ActionExecution"]:
        return [ActionExecution.from_record(r)
                for r in records.children_of(scope_of(info), self._execution_id, self.attempt)]

    @classmethod
    def from_record(cls, rec: dict, execution_id: uuid.UUID) -> "Invocation":
        err = rec.get("error")
        return cls(
            input=rec.get("input"), output=rec.get("output"),
            error=ExecutionError(code=err["code"], message=err["message"], hint=err.get("hint")) if err else None,
            tools=[ResolvedTool(name=t["name"], action_id=uuid.UUID(str(t["actionId"])),
                                action_version=t["actionVersion"]) for t in rec.get("tools") or []],
            attempt=rec["attempt"], started_at=rec.get("started_at"), finished_at=rec.get("finished_at"),
            logs=list(rec.get("logs") or []), duration_ms=rec.get("duration_ms"),
            output_bytes=rec.get("output_bytes"), usage=rec.get("usage"), _execution_id=execution_id,
        )


@strawberry.type
class ActionExecution:
    execution_id: uuid.UUID
    action_id: uuid.UUID
    action_version: int
    status: ExecutionStatus
    parent_execution_id: Optional[uuid.UUID]
    root_execution_id: uuid.UUID
    call_sequence: Optional[int]
    depth: int
    attempts: int
    started_by: Optional[StartedBy]
    event: ExecutionEvent
    session_id: Optional[uuid.UUID]
    created_at: datetime.datetime
    rolled_back: bool = strawberry.field(
        description="Recorded beneath a failed call, a rolled-back attempt or a preview: none of its writes remain")
    mcp_server_id: Optional[uuid.UUID] = strawberry.field(
        default=None, description="The MCP server the call was made through; null for a call not made through one")
    trigger_id: Optional[uuid.UUID] = strawberry.field(
        default=None, description="The trigger that started this run; null for a run no trigger started")
    trigger_depth: int = strawberry.field(
        default=0, description="0 for what a client did; 1 for a run fired by a client's write, one more for each"
                               " trigger-started run in between (at most 8)")
    _invocations: strawberry.Private[Optional[list[dict]]] = None

    @strawberry.field
    def invocation(self, info: strawberry.Info) -> Optional[Invocation]:
        records = self._load_invocations(info)
        return Invocation.from_record(records[-1], self.execution_id) if records else None

    @strawberry.field
    def invocations(self, info: strawberry.Info) -> list[Invocation]:
        return [Invocation.from_record(r, self.execution_id) for r in self._load_invocations(info)]

    @strawberry.field(description="The latest attempt's calls, in call order")
    def children(self, info: strawberry.Info) -> list["ActionExecution"]:
        scope = scope_of(info)
        invocations = self._load_invocations(info)
        if not invocations:  # queued, or running its first attempt: no call is recorded yet
            scope.require("SELECT", records.EXECUTION_INDEX, index=True)
            return []
        return [ActionExecution.from_record(r)
                for r in records.children_of(scope, self.execution_id, invocations[-1]["attempt"])]

    def _load_invocations(self, info: strawberry.Info) -> list[dict]:
        if self._invocations is None:
            self._invocations = records.invocations_of(scope_of(info), self.execution_id)
        return self._invocations

    @classmethod
    def from_record(cls, rec: dict) -> "ActionExecution":
        event = rec.get("event") or {}
        started_by = rec.get("started_by")
        return cls(
            execution_id=rec["execution_id"], action_id=rec["action_id"], action_version=rec["action_version"],
            status=ExecutionStatus(rec["status"]), parent_execution_id=rec.get("parent_execution_id"),
            root_execution_id=rec["root_execution_id"], call_sequence=rec.get("call_sequence"),
            depth=rec.get("depth", 0), attempts=rec.get("attempts", 0),
            started_by=StartedBy(execution_id=started_by) if rec.get("started") else None,
            event=ExecutionEvent(event_type=event.get("eventType", ""), data=event.get("data"),
                                 record_type=event.get("recordType"),
                                 record_id=uuid.UUID(event["recordId"]) if event.get("recordId") else None),
            session_id=rec.get("session_id"), created_at=rec["created_at"],
            rolled_back=rec.get("rolled_back", False), mcp_server_id=rec.get("mcp_server_id"),
            trigger_id=rec.get("trigger_id"), trigger_depth=rec.get("trigger_depth") or 0,
            _invocations=rec.get("invocations"),
        )


@strawberry.enum
class PlannedActionStatus(enum.Enum):
    PROPOSED = "PROPOSED"
    CONFIRMED = "CONFIRMED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


@strawberry.type(description="A model's call that waits for a person to confirm it (DESIGN 14)")
class PlannedAction:
    id: uuid.UUID
    action_id: uuid.UUID
    action_version: int
    input: Optional[JSON]
    status: PlannedActionStatus
    preview: Optional[JSON] = strawberry.field(description="{status, output | error, children: [{actionId, status}]}")
    proposed_by_execution_id: Optional[uuid.UUID]
    client_id: uuid.UUID = strawberry.field(description="The proposer's client")
    mcp_server_id: Optional[uuid.UUID]
    expires_at: datetime.datetime
    decided_by: Optional[uuid.UUID]
    decided_at: Optional[datetime.datetime]
    reason: Optional[str]
    execution_id: Optional[uuid.UUID]
    created_at: datetime.datetime

    @strawberry.field(description="The action at the proposed version")
    def action(self, info: strawberry.Info) -> Optional[Action]:
        record = registry.get_action(scope_of(info), self.action_id, self.action_version)
        return Action.from_record(record) if record else None

    @strawberry.field(description="The run a confirm started")
    def execution(self, info: strawberry.Info) -> Optional[ActionExecution]:
        if self.execution_id is None:
            return None
        record = records.get_execution(scope_of(info), self.execution_id)
        return ActionExecution.from_record(record) if record else None

    @classmethod
    def from_row(cls, row: dict) -> "PlannedAction":
        return cls(id=row["id"], action_id=row["action_id"], action_version=row["action_version"], input=row["input"],
                   status=PlannedActionStatus(row["status"]), preview=row["preview"],
                   proposed_by_execution_id=row["proposed_by_execution_id"], client_id=row["client_id"],
                   mcp_server_id=row["mcp_server_id"], expires_at=row["expires_at"], decided_by=row["decided_by"],
                   decided_at=row["decided_at"], reason=row["reason"], execution_id=row["execution_id"],
                   created_at=row["created_at"])


@strawberry.type
class SessionInput:
    execution_id: uuid.UUID
    input: Optional[JSON]
    created_at: datetime.datetime
    output: Optional[JSON] = strawberry.field(default=None, description="An agent turn's final answer")


@strawberry.type
class Session:
    id: uuid.UUID
    action_id: uuid.UUID
    input: Optional[JSON]
    closed: bool
    created_at: datetime.datetime

    @strawberry.field
    def inputs(self, info: strawberry.Info) -> list[SessionInput]:
        return [SessionInput(execution_id=r["execution_id"], input=r["input"], created_at=r["created_at"],
                             output=r.get("output"))
                for r in sessions.inputs_of(scope_of(info), self.id)]

    @classmethod
    def from_row(cls, row: dict) -> "Session":
        return cls(id=row["id"], action_id=row["action_id"], input=row["input"], closed=row["closed"],
                   created_at=row["created_at"])
