"""What one caller of one MCP server sees (DESIGN 12): the listed tools it may call, each as MCP
describes a tool, and the results of calling one.

A tool is listed when its reference still resolves and the caller's and the server's layers allow
SELECT and INVOKE on its action record. Its annotations are derived from the policies, never
declared: a write through the server needs the caller's, the server's and the tool's own layers to
allow one, so a tool is read-only when one of those three has no ALLOW statement for a write.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from ...actions.registry import ACTION, action_of_row, as_document, load_action
from ...executions.engine import tool_layer
from ...executions.planned import PLANNED_RESULT_SCHEMA
from ...policy.chain import Layer
from ...scope import Scope
from ...values import uuid_of_int
from .json_text import orjson_text

log = logging.getLogger("ledger.mcp")

WRITES = ("INSERT", "UPDATE", "DELETE")
EXECUTION_ID = "ledger/executionId"
SESSION_ID = "ledger/sessionId"
PREVIEW = "ledger/preview"
ERROR = "ledger/error"
ACTION_ID = "ledger/actionId"
ACTION_VERSION = "ledger/actionVersion"


@dataclass(frozen=True)
class ListedTool:
    """One reference of the server, resolved for this request."""

    name: str
    reference: dict
    record: dict

    @property
    def fixed(self) -> dict:
        fixed = self.reference.get("input")
        return fixed if isinstance(fixed, dict) else {}

    @property
    def pinned_version(self) -> int | None:
        return self.reference.get("actionVersion")

    @property
    def confirm(self) -> bool:
        """Whether a call is a proposal a person confirms (DESIGN 14): it answers the planned result."""
        return bool(self.reference.get("confirm"))

    @property
    def output_wrapped(self) -> bool:
        """Whether the output is wrapped as `{result}`: MCP's structuredContent is an object."""
        schema = (self.record.get("tool") or {}).get("outputSchema")
        return not self.confirm and schema is not None and schema.get("type") != "object"

    def structured(self, output: Any) -> Any:
        if self.output_wrapped or (not isinstance(output, dict)):
            return {"result": output}
        return output


# The rows of the server's actions read ahead in this transaction (`server_and_tools_of_row`), by (id, version).
Preloaded = dict[tuple[uuid.UUID, int | None], dict]


def listed_tools(scope: Scope, server: Any, preloaded: Preloaded | None = None) -> list[ListedTool]:
    """The server's tools that this scope's chain (the caller's layer, then the server's) may SELECT and
    INVOKE, in the order listed. References that no longer resolve are left out, and logged.

    `preloaded`: the rows of the server's actions that this scope's transaction has read already."""
    return list(iter_listed_tools(scope, server, preloaded))


def iter_listed_tools(scope: Scope, server: Any, preloaded: Preloaded | None = None) -> Iterator[ListedTool]:
    """`listed_tools` one at a time: a call stops at the tool it names, resolving no reference after it."""
    names: set[str] = set()
    for position, reference in enumerate(server.tools):
        record = _resolve(scope, server, position, reference, preloaded)
        if record is None:
            continue
        name = (record.get("tool") or {}).get("name") or record["name"]
        if name in names:
            log.warning("MCP server %s: tools[%d] (%r) resolves to the tool name %r of an earlier reference; "
                        "it is left out of the list", server.id, position, reference.get("name"), name,
                        extra={"mcpServerId": str(server.id)})
            continue
        document = as_document(record)
        if not (scope.allows("SELECT", ACTION, document) and scope.allows("INVOKE", ACTION, document)):
            continue
        names.add(name)
        yield ListedTool(name, reference, record)


def _resolve(scope: Scope, server: Any, position: int, reference: dict, preloaded: Preloaded | None) -> dict | None:
    try:
        action_id = uuid_of_text(str(reference.get("actionId")))
    except ValueError:
        log.warning("MCP server %s: tools[%d] has no valid actionId; it is left out of the list", server.id,
                    position, extra={"mcpServerId": str(server.id)})
        return None
    version = reference.get("actionVersion")
    row = preloaded.get((action_id, version)) if preloaded and (version is None or type(version) is int) else None
    record = action_of_row(row) if row is not None else load_action(scope, action_id, version)
    if record is None or record["status"] == "DELETED" or not record.get("tool"):
        log.warning("MCP server %s: tools[%d] (%r, version %s) no longer resolves; it is left out of the list",
                    server.id, position, reference.get("name"), reference.get("actionVersion") or "latest",
                    extra={"mcpServerId": str(server.id)})
        return None
    return record


def describe(tool: ListedTool, client: Layer, server: Layer) -> types.Tool:
    """The tool as tools/list shows it."""
    block = tool.record.get("tool") or {}
    read_only = not all(layer.has_allow_for(WRITES) for layer in (client, server, tool_layer(tool.record)))
    output_schema = block.get("outputSchema")
    if tool.confirm:
        output_schema = PLANNED_RESULT_SCHEMA
    elif output_schema is not None and output_schema.get("type") != "object":
        output_schema = {"type": "object", "properties": {"result": output_schema}, "required": ["result"]}
    description = block.get("description") or tool.record.get("description")
    if tool.confirm:
        description = (f"{description or ''}\n\nA call does not run this tool: it proposes the call, which a person "
                       "confirms or rejects. The result is the plan (plannedActionId) and a preview of what the "
                       "call would do; get_task with the plannedActionId follows it.").strip()
    return types.Tool(
        name=tool.name,
        description=description,
        input_schema=_without_fixed(block.get("inputSchema") or {"type": "object"}, tool.fixed),
        output_schema=output_schema,
        annotations=types.ToolAnnotations(read_only_hint=read_only, destructive_hint=not read_only,
                                          open_world_hint=False),
        _meta={ACTION_ID: str(tool.record["action_id"]), ACTION_VERSION: tool.pinned_version},
    )


def _without_fixed(schema: dict, fixed: dict) -> dict:
    """The inputSchema without the top-level properties the reference fixes: the model neither sees
    nor sets them."""
    if not fixed:
        return schema
    shown = copy.deepcopy(schema)
    properties = shown.get("properties")
    if isinstance(properties, dict):
        for name in fixed:
            properties.pop(name, None)
    required = shown.get("required")
    if isinstance(required, list):
        shown["required"] = [name for name in required if name not in fixed]
        if not shown["required"]:
            del shown["required"]
    return shown


def uuid_of_text(text: str) -> uuid.UUID:
    """`uuid.UUID(text)`, without its steps for text with no colon and no brace: `UUID.__init__` then strips
    nothing but the hyphens and reads the 32 characters left with `int(…, 16)`, as here. Anything else, and
    text `int` refuses, goes to `uuid.UUID` itself (its error included)."""
    if ":" not in text and "{" not in text and "}" not in text:
        digits = text.replace("-", "")
        if len(digits) == 32:
            try:
                return uuid_of_int(int(digits, 16))  # 32 hex digits: 128 bits
            except ValueError:
                pass
    return uuid.UUID(text)


# ---------------------------------------------------------------------------- results


def _text(value: Any) -> str:
    text = orjson_text(value, ascii_only=False)
    if text is not None:
        return text.decode()
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def succeeded(tool: ListedTool, output: Any, meta: dict) -> types.CallToolResult:
    structured = tool.structured(output)
    return types.CallToolResult(content=[types.TextContent(text=_text(structured))], structured_content=structured,
                                _meta=meta)


def failed(code: str, message: str, hint: str | None, meta: dict) -> types.CallToolResult:
    """An isError result the model reads in full: `<code>: <message>` and the hint."""
    text = f"{code}: {message}" + (f"\nhint: {hint}" if hint else "")
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True,
                                _meta={**meta, ERROR: {"code": code, "message": message, "hint": hint}})
