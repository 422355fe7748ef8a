"""Schema warnings (DESIGN 16): where a provider adapter cannot put a tool's schema into a model client's
dialect unchanged. A warning never fails a write: the ledger validates every input and output against
the full schema anyway, but the model is told less than the schema says (or is no longer held to it)
and will make mistakes that cost a round.

The warnings are the changes the adapters' own converters report (ledger/models/dialects.py), nothing
else: a rule lives in one place. This module only chooses the schemas a model is given and names each
change by its path in the written definition (`tool.inputSchema.properties.when.format`).
"""

from __future__ import annotations

from typing import Any

from ..models.dialects import Change, dialect_changes

# The schemas of a tool block a model is given: the input always; the output of an agent or a model
# tool, which is asked of the model as structured output.
_OUTPUT_KINDS = ("agent", "model")


def dialect_warnings(tool_block: dict | None, kind: str | None = None) -> list[dict]:
    """[{path, client, message}] for the tool block's schemas, paths as in a write's problems."""
    if not isinstance(tool_block, dict):
        return []
    found: list[dict] = []
    schemas = [("tool.inputSchema", tool_block.get("inputSchema"))]
    if kind in _OUTPUT_KINDS:
        schemas.append(("tool.outputSchema", tool_block.get("outputSchema")))
    for prefix, schema in schemas:
        if isinstance(schema, (dict, bool)):
            found += [{"path": dotted(prefix, schema, change), "client": change.client, "message": change.message}
                      for change in dialect_changes(schema)]
    return found


def dotted(prefix: str, schema: Any, change: Change) -> str:
    """The change's location as a write's problems name paths: `.name` for a key, `[i]` for a list index."""
    path, node = prefix, schema
    for token in change.at:
        if isinstance(node, list):
            path += f"[{token}]"
            node = node[int(token)] if token.isdigit() and int(token) < len(node) else None
        else:
            path += f".{token}" if path else token
            node = node.get(token) if isinstance(node, dict) else None
    return path
