"""What the server side hands the runtime and what it gets back.

These types are imported by the server (actions, executions) and by the pool; the executor child
never sees them, it speaks only the wire messages of `protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Program:
    """One immutable tool program.

    `key` identifies the program for the executors' caches, e.g. (tenant_id, action_id, version):
    two programs with the same key must have the same source and tool names.
    """

    key: tuple
    source: str
    tool_names: tuple[str, ...] = ()
    # Code mode (an MCP server's `program`): run() takes no argument, tools take keyword arguments,
    # attempt() exists, and of graphql() and cel() only `natives` do.
    code_mode: bool = False
    natives: tuple[str, ...] = ("graphql", "cel")

    def wire(self) -> dict:
        """What the executor needs to load it, beside the source."""
        return {"tools": list(self.tool_names), "code": self.code_mode, "natives": list(self.natives)}


@dataclass(eq=False)
class CallFailure(Exception):
    """Raised by a `Host` method when the call fails the calling program (check=True semantics)."""

    code: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Host(Protocol):
    """The server side of a run's host calls; every method is called on the thread running the lease.

    Each returns the JSON value handed back to Starlark, or raises `CallFailure` to fail the calling
    program. A method may call `lease.run(...)` on the same lease to run a nested tool's program.
    Any other exception aborts the calling program and propagates out of `ExecutorLease.run`.
    """

    def graphql(self, document: str, variables: dict | None, operation_name: str | None, check: bool) -> Any: ...

    def cel(self, expression: str, variables: dict | None, check: bool) -> Any: ...

    def call_tool(self, name: str, input: Any, check: bool) -> Any: ...


@dataclass
class RunOutcome:
    """The result of one run: its output, or the failure's code, message and hint; and its print() lines."""

    ok: bool
    output: Any = None
    error_code: str | None = None
    error_message: str | None = None
    error_hint: str | None = None
    logs: list[str] = field(default_factory=list)

    @classmethod
    def failure(cls, code: str, message: str, hint: str | None = None, logs: list[str] | None = None) -> RunOutcome:
        return cls(ok=False, error_code=code, error_message=message, error_hint=hint, logs=logs or [])
