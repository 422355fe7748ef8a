"""The native tools every tenant has without creating them, at version 1, with fixed ids (DESIGN 11).

`graphql` and `cel` can be called like any tool and be the kind of an action. `program`, `invoke`,
`get_task` and `cancel_task` act for an MCP server's caller: only a server may list them, and nobody
invokes or starts them directly. `read_result` and `model_call` act for an agent's turn (DESIGN 13): the
turn records its model calls and its reads of offloaded results as their executions; nobody lists,
invokes or starts them.
"""

from __future__ import annotations

import datetime
import uuid

from ..policy.chain import Layer

GRAPHQL_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
CEL_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")
PROGRAM_ID = uuid.UUID("00000000-0000-4000-8000-000000000003")
INVOKE_ID = uuid.UUID("00000000-0000-4000-8000-000000000004")
GET_TASK_ID = uuid.UUID("00000000-0000-4000-8000-000000000005")
CANCEL_TASK_ID = uuid.UUID("00000000-0000-4000-8000-000000000006")
READ_RESULT_ID = uuid.UUID("00000000-0000-4000-8000-000000000007")
MODEL_CALL_ID = uuid.UUID("00000000-0000-4000-8000-000000000008")
NATIVE_CREATED_AT = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

GRAPHQL_INPUT = {
    "type": "object",
    "properties": {
        "document": {"type": "string"},
        "variables": {"type": ["object", "null"]},
        "operationName": {"type": ["string", "null"]},
    },
    "required": ["document"],
    "additionalProperties": False,
}
GRAPHQL_OUTPUT = {
    "type": "object",
    "properties": {"data": {}, "errors": {"type": ["array", "null"]}},
}
CEL_INPUT = {
    "type": "object",
    "properties": {"expression": {"type": "string"}, "vars": {"type": ["object", "null"]}},
    "required": ["expression"],
    "additionalProperties": False,
}
CEL_OUTPUT = {"type": "object", "properties": {"value": {}}}

PROGRAM_INPUT = {
    "type": "object",
    "properties": {
        "src": {"type": "string", "description": "A Starlark program that defines run() (no argument). In it, "
                "each tool of this server is tools.<name>(prop=value, ...); attempt(tools.<name>, prop=value, ...) "
                "returns {status, output | error, executionId} instead of failing the program."},
        "preview": {"type": "boolean", "description": "Run it, then roll every write back."},
    },
    "required": ["src"],
    "additionalProperties": False,
}
PROGRAM_OUTPUT = {
    "type": "object",
    "properties": {"value": {}, "logs": {"type": "array", "items": {"type": "string"}}, "preview": {"type": "boolean"}},
    "required": ["value", "logs"],
}
INVOKE_INPUT = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "description": "The name of one of this server's tools."},
        "input": {"type": "object", "description": "The tool's input (default {})."},
        "version": {"type": "integer", "minimum": 1, "description": "The version you expect the tool to be at."},
        "preview": {"type": "boolean", "description": "Run it, then roll every write back."},
        "start": {"type": "boolean", "description": "Start it as a task instead of waiting for its output."},
    },
    "required": ["tool"],
    "additionalProperties": False,
}
TASK_INPUT = {
    "type": "object",
    "properties": {"taskId": {"type": "string", "format": "uuid", "description": "The taskId invoke returned, or a plannedActionId."}},
    "required": ["taskId"],
    "additionalProperties": False,
}
TASK_OUTPUT = {
    "type": "object",
    "properties": {
        "taskId": {"type": "string"},
        "status": {"enum": ["working", "completed", "failed", "cancelled"]},
        "statusMessage": {"type": ["string", "null"]},
        "output": {},
        "error": {"type": ["object", "null"]},
        "pollIntervalMs": {"type": "integer"},
    },
    "required": ["taskId", "status"],
}

READ_RESULT_INPUT = {
    "type": "object",
    "properties": {
        "executionId": {"type": "string", "description": "The $offloaded id of one of this turn's tool results."},
        "path": {"type": "string", "description": "A JSON pointer into the result (e.g. /items/0); the whole "
                 "result when omitted."},
        "offset": {"type": "integer", "minimum": 0, "description": "The first item (array) or character "
                   "(string) to return."},
        "limit": {"type": "integer", "minimum": 0, "description": "How many items or characters to return."},
    },
    "required": ["executionId"],
    "additionalProperties": False,
}
MODEL_CALL_INPUT = {
    "type": "object",
    "properties": {
        "provider": {"type": "string"}, "model": {"type": "string"}, "toolChoice": {"type": "string"},
        "tools": {"type": "array", "items": {"type": "string"}}, "messages": {"type": "array"},
    },
    "required": ["provider", "model", "messages"],
}
MODEL_CALL_OUTPUT = {
    "type": "object",
    "properties": {
        "stopReason": {"type": "string"}, "usage": {"type": "object"}, "latencyMs": {"type": "integer"},
        "attempts": {"type": "integer"}, "messages": {"type": "array"}, "ignoredToolCalls": {"type": "array"},
    },
}

NATIVE_TOOLS = {
    "graphql": {
        "id": GRAPHQL_ID,
        "description": "Runs a GraphQL document against the ledger's schema, in the caller's transaction.",
        "inputSchema": GRAPHQL_INPUT,
        "outputSchema": GRAPHQL_OUTPUT,
        # graphql's own layer allows everything: the layers above it decide.
        "layer": Layer("native tool \"graphql\" v1", (), allow_all=True),
    },
    "cel": {
        "id": CEL_ID,
        "description": "Evaluates a CEL expression over the given variables.",
        "inputSchema": CEL_INPUT,
        "outputSchema": CEL_OUTPUT,
        # cel performs no operations, so its layer allows none.
        "layer": Layer("native tool \"cel\" v1", ()),
    },
    # The natives below act for an MCP server's caller: a call adds no tool level, so their layers are
    # never part of a chain. Each denies everything, should one ever be placed in a chain by mistake.
    "program": {
        "id": PROGRAM_ID,
        "description": "Runs a Starlark program that calls this server's tools as tools.<name>(...) in one "
                       "transaction: all its writes commit together or not at all. Returns {value, logs}, "
                       "value being what run() returned.",
        "inputSchema": PROGRAM_INPUT,
        "outputSchema": PROGRAM_OUTPUT,
        "layer": Layer("native tool \"program\" v1", ()),
    },
    "invoke": {
        "id": INVOKE_ID,
        "description": "Calls one of this server's tools by name. Returns its output; with preview: true, "
                       "{status, output or error, children} and nothing is kept; with start: true, "
                       "{taskId, status} at once (follow it with get_task).",
        "inputSchema": INVOKE_INPUT,
        "outputSchema": None,
        "layer": Layer("native tool \"invoke\" v1", ()),
    },
    "get_task": {
        "id": GET_TASK_ID,
        "description": "Reads a task that invoke started, or a planned action by its plannedActionId (working "
                       "until a person decides; cancelled when rejected or expired; then its run). Returns {taskId, "
                       "status (working, completed, failed or cancelled), statusMessage, output, error, "
                       "pollIntervalMs}.",
        "inputSchema": TASK_INPUT,
        "outputSchema": TASK_OUTPUT,
        "layer": Layer("native tool \"get_task\" v1", ()),
    },
    "cancel_task": {
        "id": CANCEL_TASK_ID,
        "description": "Cancels a task that invoke started and has not finished. Returns the task as get_task "
                       "does: cancelled, or still working while a running attempt stops and rolls back.",
        "inputSchema": TASK_INPUT,
        "outputSchema": TASK_OUTPUT,
        "layer": Layer("native tool \"cancel_task\" v1", ()),
    },
    # The natives below act for an agent's turn (DESIGN 13): the turn runs them, adding no tool level and
    # no layer; each layer denies everything, like the server natives'.
    "read_result": {
        "id": READ_RESULT_ID,
        "description": "Reads a tool result of this turn that reached you offloaded ({\"$offloaded\": id, "
                       "\"preview\": ...}): the whole value, or the part at a JSON pointer `path`, with `offset` "
                       "and `limit` for an array or a string. Returns the bare value.",
        "inputSchema": READ_RESULT_INPUT,
        "outputSchema": None,
        "layer": Layer("native tool \"read_result\" v1", ()),
    },
    "model_call": {
        "id": MODEL_CALL_ID,
        "description": "One request to a model, made by an agent's turn or a model tool: the provider, the model, the new messages "
                       "of the request and the response, the stop reason, the token usage and the latency.",
        "inputSchema": MODEL_CALL_INPUT,
        "outputSchema": MODEL_CALL_OUTPUT,
        "layer": Layer("native tool \"model_call\" v1", ()),
    },
}
NATIVE_BY_ID = {spec["id"]: name for name, spec in NATIVE_TOOLS.items()}

# The natives an action can take as its kind, and call in a program as graphql() and cel().
NATIVE_KINDS = frozenset({"graphql", "cel"})
# The natives that only an MCP server may list.
SERVER_NATIVES = frozenset({"program", "invoke", "get_task", "cancel_task"})
# The natives an agent's turn runs for itself (DESIGN 13).
AGENT_NATIVES = {"read_result": READ_RESULT_ID, "model_call": MODEL_CALL_ID}
# Natives that act for their caller: never invoked or started directly (`action_not_callable`).
ACTS_FOR_CALLER = SERVER_NATIVES | frozenset(AGENT_NATIVES)
RESERVED_NAMES = frozenset(NATIVE_TOOLS)
RESERVED_IDS = frozenset(NATIVE_BY_ID)


def native_record(name: str) -> dict:
    spec = NATIVE_TOOLS[name]
    return {
        "action_id": spec["id"], "version": 1, "latest_version": 1, "name": name,
        "description": spec["description"], "kind": name, "config": {"version": 1},
        "tool": {"name": name, "description": spec["description"], "inputSchema": spec["inputSchema"],
                 "outputSchema": spec["outputSchema"],
                 # read_result's own results are never offloaded (DESIGN 13).
                 "output": {"offload": "NEVER" if name == "read_result" else "AUTO"}, "session": False},
        "policies": [], "tools": [], "execution": {"maxAttempts": 3, "backoffSeconds": 1.0},
        "status": "ACTIVE", "pending": None, "enabled": True, "native": True, "created_at": NATIVE_CREATED_AT,
    }
