"""The GraphQL schema: root types, namespaces and inputs. Resolvers call services and nothing else."""

from __future__ import annotations

import datetime
import functools
import uuid
from typing import Optional

import strawberry
from graphql import execute as graphql_execute
from graphql import specified_rules
from strawberry.execution import optimized_is_awaitable
from strawberry.schema.config import StrawberryConfig
from strawberry.scalars import JSON
from strawberry.types import ExecutionResult

from ..actions import mcp_servers, registry, triggers
from ..auth import clients
from ..db.paging import clamp_first
from ..domain import accounts
from ..executions import invoke, plan_records, records, sessions
from ..queue import planned, start
from . import plans
from .context import mutation_step
from .scalars import JSON_SCALAR, Int64
from .types import (
    Account,
    Action,
    ActionExecution,
    ActionStatus,
    Client,
    Effect,
    ExecutionStatus,
    IssuedToken,
    McpServer,
    Operation,
    PlannedAction,
    PlannedActionStatus,
    Session,
    Transfer,
    Trigger,
    Viewer,
    scope_of,
)

# ---------------------------------------------------------------------------- inputs


@strawberry.input
class PolicyStatementInput:
    effect: Effect
    actions: list[Operation]
    resources: list[str]
    assertion: Optional[str] = None

    def to_json(self) -> dict:
        return {"effect": self.effect.value, "actions": [a.value for a in self.actions],
                "resources": list(self.resources), "assertion": self.assertion}


def policies_json(policies: Optional[list[PolicyStatementInput]]) -> list[dict]:
    return [p.to_json() for p in policies or []]


@strawberry.input
class ClientInput:
    name: str
    policies: list[PolicyStatementInput]


@strawberry.input
class CreateAccountInput:
    name: str
    currency: str
    allow_overdraft: Optional[bool] = None


@strawberry.input
class CreateTransferInput:
    from_account_id: uuid.UUID
    to_account_id: uuid.UUID
    amount: Int64
    memo: Optional[str] = None


@strawberry.input
class ActionWhere:
    native: Optional[bool] = None
    name: Optional[str] = None
    kind: Optional[str] = None
    status: Optional[ActionStatus] = None


@strawberry.input
class ToolOutputInput:
    offload: Optional[str] = None


@strawberry.input
class ToolBlockInput:
    name: str
    description: str
    input_schema: JSON
    output_schema: Optional[JSON] = strawberry.UNSET
    output: Optional[ToolOutputInput] = strawberry.UNSET
    response_timeout: Optional[int] = strawberry.UNSET
    session: Optional[bool] = strawberry.UNSET


@strawberry.input
class ToolReferenceInput:
    name: str
    version: Optional[int] = strawberry.UNSET
    input: Optional[JSON] = strawberry.UNSET
    confirm: Optional[bool] = strawberry.UNSET


def references_json(refs: list[ToolReferenceInput]) -> list[dict]:
    """References as plain documents; omitted fields are absent."""
    out = []
    for ref in refs:
        item: dict = {"name": ref.name}
        for key in ("version", "input", "confirm"):
            value = getattr(ref, key)
            if value is not strawberry.UNSET:
                item[key] = value
        out.append(item)
    return out


@strawberry.input
class McpServerInput:
    name: str
    description: Optional[str] = None
    instructions: Optional[str] = None
    tools: list[ToolReferenceInput]
    policies: Optional[list[PolicyStatementInput]] = None
    enabled: Optional[bool] = None

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "instructions": self.instructions,
                "tools": references_json(self.tools), "policies": policies_json(self.policies),
                "enabled": self.enabled}


@strawberry.input
class TriggerInput:
    name: str
    event: str
    condition: Optional[str] = None
    action_id: uuid.UUID
    action_version: Optional[int] = None
    input: Optional[JSON] = None
    enabled: Optional[bool] = None

    def to_json(self) -> dict:
        return {"name": self.name, "event": self.event, "condition": self.condition, "actionId": self.action_id,
                "actionVersion": self.action_version, "input": self.input, "enabled": self.enabled}


@strawberry.input
class ExecutionWhere:
    action_id: Optional[uuid.UUID] = None
    trigger_id: Optional[uuid.UUID] = None
    status: Optional[ExecutionStatus] = None
    parent_execution_id: Optional[uuid.UUID] = None

    def to_json(self) -> dict:
        return {"action_id": self.action_id, "trigger_id": self.trigger_id,
                "status": self.status.value if self.status else None,
                "parent_execution_id": self.parent_execution_id}


@strawberry.input
class ExecutionSettingsInput:
    max_attempts: Optional[int] = strawberry.UNSET
    backoff_seconds: Optional[float] = strawberry.UNSET


@strawberry.input
class ActionInput:
    name: str
    kind: str
    description: Optional[str] = strawberry.UNSET
    config: Optional[JSON] = strawberry.UNSET
    tool: Optional[ToolBlockInput] = strawberry.UNSET
    policies: Optional[list[PolicyStatementInput]] = strawberry.UNSET
    tools: Optional[list[ToolReferenceInput]] = strawberry.UNSET
    execution: Optional[ExecutionSettingsInput] = strawberry.UNSET
    enabled: Optional[bool] = strawberry.UNSET


@strawberry.input
class InvokeActionInput:
    execution_id: uuid.UUID
    action_version: Optional[int] = strawberry.UNSET
    input: Optional[JSON] = strawberry.UNSET
    session_id: Optional[uuid.UUID] = strawberry.UNSET


@strawberry.input
class StartActionInput:
    execution_id: uuid.UUID
    action_version: Optional[int] = strawberry.UNSET
    input: Optional[JSON] = strawberry.UNSET
    run_at: Optional[datetime.datetime] = strawberry.UNSET


def _given(value):
    return None if value is strawberry.UNSET else value


def action_input_json(value: ActionInput) -> dict:
    """The definition as a plain document in the contract's field names; omitted fields are absent."""

    def put(target: dict, key: str, val) -> None:
        if val is not strawberry.UNSET:
            target[key] = val

    doc: dict = {"name": value.name, "kind": value.kind}
    put(doc, "description", value.description)
    put(doc, "config", value.config)
    put(doc, "enabled", value.enabled)
    if value.tool is not strawberry.UNSET:
        if value.tool is None:
            doc["tool"] = None
        else:
            tool = {"name": value.tool.name, "description": value.tool.description,
                    "inputSchema": value.tool.input_schema}
            put(tool, "outputSchema", value.tool.output_schema)
            put(tool, "responseTimeout", value.tool.response_timeout)
            put(tool, "session", value.tool.session)
            if value.tool.output is not strawberry.UNSET:
                tool["output"] = None if value.tool.output is None else {"offload": value.tool.output.offload}
            doc["tool"] = tool
    if value.policies is not strawberry.UNSET:
        doc["policies"] = None if value.policies is None else policies_json(value.policies)
    if value.tools is not strawberry.UNSET:
        doc["tools"] = None if value.tools is None else references_json(value.tools)
    if value.execution is not strawberry.UNSET:
        if value.execution is None:
            doc["execution"] = None
        else:
            settings: dict = {}
            put(settings, "maxAttempts", value.execution.max_attempts)
            put(settings, "backoffSeconds", value.execution.backoff_seconds)
            doc["execution"] = settings
    return doc


# ---------------------------------------------------------------------------- queries


@strawberry.type
class FinancialQuery:
    @strawberry.field
    def account(self, info: strawberry.Info, id: uuid.UUID) -> Optional[Account]:
        row = accounts.get_account(scope_of(info), id)
        return Account.from_row(row) if row else None

    @strawberry.field
    def accounts(self, info: strawberry.Info, first: Optional[int] = 50, after: Optional[str] = None) -> list[Account]:
        return [Account.from_row(r) for r in accounts.list_accounts(scope_of(info), clamp_first(first, 50), after)]

    @strawberry.field
    def transfer(self, info: strawberry.Info, id: uuid.UUID) -> Optional[Transfer]:
        row = accounts.get_transfer(scope_of(info), id)
        return Transfer.from_row(row) if row else None

    @strawberry.field
    def transfers(self, info: strawberry.Info, account_id: Optional[uuid.UUID] = None, first: Optional[int] = 50,
                  after: Optional[str] = None) -> list[Transfer]:
        rows = accounts.list_transfers(scope_of(info), account_id, clamp_first(first, 50), after)
        return [Transfer.from_row(r) for r in rows]


@strawberry.type
class ActionsQuery:
    @strawberry.field
    def action(self, info: strawberry.Info, id: uuid.UUID, version: Optional[int] = None) -> Optional[Action]:
        record = registry.get_action(scope_of(info), id, version)
        return Action.from_record(record) if record else None

    @strawberry.field
    def actions(self, info: strawberry.Info, where: Optional[ActionWhere] = None, first: Optional[int] = 100,
                after: Optional[str] = None) -> list[Action]:
        filters = {}
        if where is not None:
            filters = {"native": where.native, "name": where.name, "kind": where.kind,
                       "status": where.status.value if where.status else None}
        records = registry.list_actions(scope_of(info), filters, clamp_first(first, 100), after)
        return [Action.from_record(r) for r in records]

    @strawberry.field
    def execution(self, info: strawberry.Info, id: uuid.UUID) -> Optional[ActionExecution]:
        record = records.get_execution(scope_of(info), id)
        return ActionExecution.from_record(record) if record else None

    @strawberry.field
    def session(self, info: strawberry.Info, id: uuid.UUID) -> Optional[Session]:
        row = sessions.get_session(scope_of(info), id)
        return Session.from_row(row) if row else None

    @strawberry.field(description="Executions in (createdAt, id) order: top-level ones, unless parentExecutionId")
    def executions(self, info: strawberry.Info, where: Optional[ExecutionWhere] = None, first: Optional[int] = 50,
                   after: Optional[str] = None) -> list[ActionExecution]:
        found = records.list_executions(scope_of(info), where.to_json() if where else {}, clamp_first(first, 50),
                                        after)
        return [ActionExecution.from_record(r) for r in found]


@strawberry.type
class TriggersQuery:
    @strawberry.field
    def trigger(self, info: strawberry.Info, id: uuid.UUID) -> Optional[Trigger]:
        found = triggers.get_trigger(scope_of(info), id)
        return Trigger.from_trigger(found) if found else None

    @strawberry.field
    def triggers(self, info: strawberry.Info, first: Optional[int] = 100, after: Optional[str] = None) -> list[Trigger]:
        return [Trigger.from_trigger(t) for t in triggers.list_triggers(scope_of(info), clamp_first(first, 100), after)]


@strawberry.type
class McpServersQuery:
    @strawberry.field
    def mcp_server(self, info: strawberry.Info, id: uuid.UUID) -> Optional[McpServer]:
        server = mcp_servers.get_server(scope_of(info), id)
        return McpServer.from_server(server) if server else None

    @strawberry.field
    def mcp_servers(self, info: strawberry.Info, first: Optional[int] = 100,
                    after: Optional[str] = None) -> list[McpServer]:
        servers = mcp_servers.list_servers(scope_of(info), clamp_first(first, 100), after)
        return [McpServer.from_server(s) for s in servers]


@strawberry.type
class PlannedActionsQuery:
    @strawberry.field
    def planned_action(self, info: strawberry.Info, id: uuid.UUID) -> Optional[PlannedAction]:
        row = plan_records.get_plan(scope_of(info), id)
        return PlannedAction.from_row(row) if row else None

    @strawberry.field
    def planned_actions(self, info: strawberry.Info, status: Optional[PlannedActionStatus] = None,
                        first: Optional[int] = 50, after: Optional[str] = None) -> list[PlannedAction]:
        rows = plan_records.list_plans(scope_of(info), status.value if status else None, clamp_first(first, 50),
                                       after)
        return [PlannedAction.from_row(r) for r in rows]


# A root field that only returns its namespace object (plans.NAMESPACE: a plan resolves it once).
_NAMESPACE = {plans.NAMESPACE: True}


@strawberry.type
class Query:
    @strawberry.field(metadata=_NAMESPACE)
    def actions(self) -> ActionsQuery:
        return ActionsQuery()

    @strawberry.field(metadata=_NAMESPACE)
    def planned_actions(self) -> PlannedActionsQuery:
        return PlannedActionsQuery()

    @strawberry.field(metadata=_NAMESPACE)
    def mcp_servers(self) -> McpServersQuery:
        return McpServersQuery()

    @strawberry.field(metadata=_NAMESPACE)
    def triggers(self) -> TriggersQuery:
        return TriggersQuery()

    @strawberry.field(metadata=_NAMESPACE)
    def financial(self) -> FinancialQuery:
        return FinancialQuery()

    @strawberry.field
    def viewer(self, info: strawberry.Info) -> Viewer:
        principal = scope_of(info).principal
        return Viewer(tenant_id=principal.tenant_id, client_id=principal.client_id,
                      client_name=principal.client_name)


# ---------------------------------------------------------------------------- mutations


@strawberry.type
class FinancialMutation:
    @strawberry.mutation
    @mutation_step
    def create_account(self, info: strawberry.Info, id: uuid.UUID, input: CreateAccountInput) -> Account:
        row = accounts.create_account(scope_of(info), id, input.name, input.currency, bool(input.allow_overdraft))
        return Account.from_row(row)

    @strawberry.mutation
    @mutation_step
    def create_transfer(self, info: strawberry.Info, id: uuid.UUID, input: CreateTransferInput) -> Transfer:
        row = accounts.create_transfer(scope_of(info), id, input.from_account_id, input.to_account_id,
                                       input.amount, input.memo)
        return Transfer.from_row(row)


@strawberry.type
class ClientsMutation:
    @strawberry.mutation
    @mutation_step
    def create_client(self, info: strawberry.Info, id: uuid.UUID, input: ClientInput) -> Client:
        return Client.from_row(clients.create_client(scope_of(info), id, input.name, policies_json(input.policies)))

    @strawberry.mutation
    @mutation_step
    def update_client(self, info: strawberry.Info, id: uuid.UUID, input: ClientInput) -> Client:
        return Client.from_row(clients.update_client(scope_of(info), id, input.name, policies_json(input.policies)))

    @strawberry.mutation
    @mutation_step
    def disable_client(self, info: strawberry.Info, id: uuid.UUID) -> Client:
        return Client.from_row(clients.disable_client(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def issue_token(self, info: strawberry.Info, client_id: uuid.UUID, ttl_seconds: Optional[int] = None,
                    mcp_server: Optional[uuid.UUID] = None) -> IssuedToken:
        scope = scope_of(info)
        confined_to = mcp_servers.require_server(scope, mcp_server).id if mcp_server is not None else None
        token, expires = clients.issue_token(scope, client_id, ttl_seconds, mcp_server=confined_to)
        expires_at = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc) if expires else None
        return IssuedToken(token=token, expires_at=expires_at)


@strawberry.type
class ActionsMutation:
    @strawberry.mutation
    @mutation_step
    def create_action(self, info: strawberry.Info, id: uuid.UUID, input: ActionInput) -> Action:
        return Action.from_record(registry.create_action(scope_of(info), id, action_input_json(input),
                                                         warn=info.context.warner(info)))

    @strawberry.mutation
    @mutation_step
    def update_action(self, info: strawberry.Info, id: uuid.UUID, input: ActionInput) -> Action:
        return Action.from_record(registry.update_action(scope_of(info), id, action_input_json(input),
                                                         warn=info.context.warner(info)))

    @strawberry.mutation
    @mutation_step
    def publish_action(self, info: strawberry.Info, id: uuid.UUID) -> Action:
        return Action.from_record(registry.publish_action(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def disable_action(self, info: strawberry.Info, id: uuid.UUID) -> Action:
        return Action.from_record(registry.disable_action(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def enable_action(self, info: strawberry.Info, id: uuid.UUID) -> Action:
        return Action.from_record(registry.enable_action(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def delete_action(self, info: strawberry.Info, id: uuid.UUID) -> Action:
        return Action.from_record(registry.delete_action(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def invoke_action(self, info: strawberry.Info, id: uuid.UUID, input: InvokeActionInput) -> ActionExecution:
        record = invoke.invoke_action(
            scope_of(info), id, input.execution_id, _given(input.action_version),
            None if input.input is strawberry.UNSET else input.input, _given(input.session_id),
        )
        return ActionExecution.from_record(record)

    @strawberry.mutation
    @mutation_step
    def start_action(self, info: strawberry.Info, id: uuid.UUID, input: StartActionInput) -> ActionExecution:
        record = start.start_action(
            scope_of(info), id, input.execution_id, _given(input.action_version),
            None if input.input is strawberry.UNSET else input.input, _given(input.run_at),
        )
        return ActionExecution.from_record(record)

    @strawberry.mutation
    @mutation_step
    def cancel_execution(self, info: strawberry.Info, id: uuid.UUID) -> ActionExecution:
        return ActionExecution.from_record(start.cancel_execution(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def close_session(self, info: strawberry.Info, id: uuid.UUID) -> Session:
        return Session.from_row(sessions.close_session(scope_of(info), id))


@strawberry.type
class McpServersMutation:
    @strawberry.mutation
    @mutation_step
    def create_mcp_server(self, info: strawberry.Info, id: uuid.UUID, input: McpServerInput) -> McpServer:
        return McpServer.from_server(mcp_servers.create_server(scope_of(info), id, input.to_json()))

    @strawberry.mutation
    @mutation_step
    def update_mcp_server(self, info: strawberry.Info, id: uuid.UUID, input: McpServerInput) -> McpServer:
        return McpServer.from_server(mcp_servers.update_server(scope_of(info), id, input.to_json()))

    @strawberry.mutation
    @mutation_step
    def delete_mcp_server(self, info: strawberry.Info, id: uuid.UUID) -> McpServer:
        return McpServer.from_server(mcp_servers.delete_server(scope_of(info), id))


@strawberry.type
class TriggersMutation:
    @strawberry.mutation
    @mutation_step
    def create_trigger(self, info: strawberry.Info, id: uuid.UUID, input: TriggerInput) -> Trigger:
        return Trigger.from_trigger(triggers.create_trigger(scope_of(info), id, input.to_json()))

    @strawberry.mutation
    @mutation_step
    def update_trigger(self, info: strawberry.Info, id: uuid.UUID, input: TriggerInput) -> Trigger:
        return Trigger.from_trigger(triggers.update_trigger(scope_of(info), id, input.to_json()))

    @strawberry.mutation
    @mutation_step
    def delete_trigger(self, info: strawberry.Info, id: uuid.UUID) -> Trigger:
        return Trigger.from_trigger(triggers.delete_trigger(scope_of(info), id))


@strawberry.type
class PlannedActionsMutation:
    @strawberry.mutation
    @mutation_step
    def confirm_planned_action(self, info: strawberry.Info, id: uuid.UUID) -> PlannedAction:
        return PlannedAction.from_row(planned.confirm_plan(scope_of(info), id))

    @strawberry.mutation
    @mutation_step
    def reject_planned_action(self, info: strawberry.Info, id: uuid.UUID, reason: Optional[str] = None) -> PlannedAction:
        return PlannedAction.from_row(planned.reject_plan(scope_of(info), id, reason))


@strawberry.type
class Mutation:
    @strawberry.field(metadata=_NAMESPACE)
    def actions(self) -> ActionsMutation:
        return ActionsMutation()

    @strawberry.field(metadata=_NAMESPACE)
    def planned_actions(self) -> PlannedActionsMutation:
        return PlannedActionsMutation()

    @strawberry.field(metadata=_NAMESPACE)
    def financial(self) -> FinancialMutation:
        return FinancialMutation()

    @strawberry.field(metadata=_NAMESPACE)
    def clients(self) -> ClientsMutation:
        return ClientsMutation()

    @strawberry.field(metadata=_NAMESPACE)
    def mcp_servers(self) -> McpServersMutation:
        return McpServersMutation()

    @strawberry.field(metadata=_NAMESPACE)
    def triggers(self) -> TriggersMutation:
        return TriggersMutation()


MAX_TOKENS = 20_000


def _document_caches():
    """The parse and validate steps of an execution, each cached by document text (bounded LRU caches
    shared by all requests): parsing stops at MAX_TOKENS tokens, validation adds the depth and alias
    limits to the schema's rules."""
    import functools

    from graphql import parse
    from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter
    from strawberry.schema.schema import validate_document

    limits = (*QueryDepthLimiter(max_depth=15).validation_rules,
              *MaxAliasesLimiter(max_alias_count=200).validation_rules)
    parse_document = functools.lru_cache(maxsize=1024)(functools.partial(parse, max_tokens=MAX_TOKENS))
    cached_validate = functools.lru_cache(maxsize=1024)(validate_document)

    def validate(graphql_schema, document, rules) -> list:
        return cached_validate(graphql_schema, document, tuple(rules) + limits)

    return parse_document, validate


_parse_document, _validate_document = _document_caches()
_SPECIFIED_RULES = tuple(specified_rules)  # the rules strawberry validates with by default


def _document_cache_extension() -> type:
    """One extension doing the work of four (MaxTokensLimiter, the depth and alias limits, ParserCache and
    ValidationCache): strawberry makes every extension anew and enters its hooks on every execution, so
    one costs less than four. Used when an execution takes strawberry's own path (see _Schema)."""
    from strawberry.extensions import SchemaExtension

    class DocumentCache(SchemaExtension):
        def on_parse(self):
            context = self.execution_context
            context.graphql_document = _parse_document(context.query)
            yield

        def on_validate(self):
            context = self.execution_context
            context.pre_execution_errors = _validate_document(context.schema._schema, context.graphql_document,
                                                              context.validation_rules)
            yield

    return DocumentCache


class _Schema(strawberry.Schema):
    def process_errors(self, errors, execution_context=None) -> None:
        """Strawberry logs every error with its formatted traceback, expected ones included (a denial, a
        domain rule, a lost race the server retries): 4% of a call's CPU under contention. The ledger
        answers each error itself, and logs the unexpected ones (api.documents.format_error)."""

    def execute_sync(self, query, variable_values=None, context_value=None, root_value=None, operation_name=None,
                     allowed_operation_types=None, operation_extensions=None):
        """A document that parses and validates (both cached) and names one query or mutation runs
        straight on graphql-core: strawberry's per-execution machinery around it (an execution context,
        extension instances and their hooks, a middleware manager) was about half of the cost of executing
        a small document, paid by every request and every graphql() call of a program. Anything else
        (an empty or broken document, a subscription, a missing operation, options) takes strawberry's
        own path, which reports those cases itself."""
        if query and allowed_operation_types is None and operation_extensions is None:
            prepared = _prepared(self._schema, query, operation_name)
            if prepared is not None:
                document, plan = prepared
                if plan is not None and root_value is None:
                    # The plan runs the same resolvers (api/plans.py); None: its variables do not coerce, and
                    # the full execution reports them (nothing has run).
                    planned = plans.run(self._schema, plan, context_value, variable_values, optimized_is_awaitable)
                    if planned is not None:
                        return ExecutionResult(data=planned[0], errors=planned[1])
                result = graphql_execute(self._schema, document, root_value=root_value, context_value=context_value,
                                 variable_values=variable_values, operation_name=operation_name,
                                 is_awaitable=optimized_is_awaitable)
                return ExecutionResult(data=result.data, errors=result.errors)
        return super().execute_sync(query, variable_values, context_value, root_value, operation_name,
                                    allowed_operation_types, operation_extensions)

    def run_planned(self, query: str, variable_values, context_value, operation_name):
        """`(data, errors)` of `execute_sync(query, variable_values, context_value, operation_name=...)` when
        the document has a plan and its variables coerce (it then names exactly one query or mutation); None
        otherwise, and nothing has run. For a caller that takes each document's answer this way first
        (api/documents.py `GraphQLDocuments`, a program's graphql())."""
        prepared = _prepared(self._schema, query, operation_name) if query else None
        if prepared is None or prepared[1] is None:
            return None
        return plans.run(self._schema, prepared[1], context_value, variable_values, optimized_is_awaitable)


@functools.lru_cache(maxsize=1024)
def _prepared(graphql_schema, query: str, operation_name: str | None):
    """(document, plan or None) of a document that parses, validates and names one query or mutation, by
    its text (hashing the text is cheaper than hashing the parsed document for the validation cache);
    None sends the document down strawberry's own path, which reports what is wrong with it."""
    from graphql import GraphQLError, OperationType, get_operation_ast

    from . import plans

    try:
        document = _parse_document(query)
    except GraphQLError:
        return None
    operation = get_operation_ast(document, operation_name)
    if (operation is None or operation.operation not in (OperationType.QUERY, OperationType.MUTATION)
            or _validate_document(graphql_schema, document, _SPECIFIED_RULES)):
        return None
    return document, plans.plan(graphql_schema, document, operation_name)


def build_schema() -> strawberry.Schema:
    return _Schema(query=Query, mutation=Mutation, extensions=[_document_cache_extension()],
                   config=StrawberryConfig(scalar_map={JSON: JSON_SCALAR}))


schema = build_schema()
