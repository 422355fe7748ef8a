"""The native tools every tenant has without creating them: `graphql` and `cel`, at version 1."""

from __future__ import annotations

import datetime
import uuid

from ..policy.chain import Layer

GRAPHQL_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
CEL_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")
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
}
NATIVE_BY_ID = {spec["id"]: name for name, spec in NATIVE_TOOLS.items()}
RESERVED_NAMES = frozenset(NATIVE_TOOLS)


def native_record(name: str) -> dict:
    spec = NATIVE_TOOLS[name]
    return {
        "action_id": spec["id"], "version": 1, "latest_version": 1, "name": name,
        "description": spec["description"], "kind": name, "config": {"version": 1},
        "tool": {"name": name, "description": spec["description"], "inputSchema": spec["inputSchema"],
                 "outputSchema": spec["outputSchema"], "output": {"offload": "AUTO"}, "session": False},
        "policies": [], "tools": [], "execution": {"maxAttempts": 3, "backoffSeconds": 1.0},
        "status": "ACTIVE", "pending": None, "enabled": True, "native": True, "created_at": NATIVE_CREATED_AT,
    }
