"""The ledger's MCP servers at `POST /mcp/<name>` (DESIGN 12): the route and session manager
(`endpoint`), what a caller sees and calls (`tools`, `calls`), and their telemetry."""

from .endpoint import McpEndpoint, transport_security

__all__ = ["McpEndpoint", "transport_security"]
