"""Errors a user can cause, each with a stable code, a message for a person and a hint.

Every layer raises `LedgerError` (or a subclass); the API turns it into a GraphQL error with
`extensions.code` and `extensions.hint`. Anything else that escapes is a bug and is reported as
`internal_error` without a stack trace.
"""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    """A failure the caller can act on."""

    code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        hint: str | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint
        self.extensions = extensions or {}

    def as_extensions(self) -> dict[str, Any]:
        ext: dict[str, Any] = {"code": self.code}
        if self.hint:
            ext["hint"] = self.hint
        ext.update(self.extensions)
        return ext


class Unauthenticated(LedgerError):
    code = "unauthenticated"


class NotFound(LedgerError):
    code = "not_found"


class StartNotAllowed(LedgerError):
    """A start, a trigger or a plan's decision asked for where none may be made: from inside an execution
    (standing authority is a client's, never a program's or an agent's), or of a session tool."""

    code = "start_not_allowed"


class InvalidInput(LedgerError):
    code = "invalid_input"


class Retryable(LedgerError):
    """The transaction lost a race or ran out of time; retrying it in a new transaction may succeed."""

    code = "retryable"
    # True when the request lost a race (serialization failure, deadlock): safe to re-run at once.
    race = False

    def as_extensions(self) -> dict[str, Any]:
        ext = super().as_extensions()
        ext["retryable"] = True
        return ext


class PermissionDenied(LedgerError):
    """A layer of the policy chain denied an operation on a resource."""

    code = "permission_denied"

    def __init__(self, operation: str, resource: str, layer: str, reason: str | None = None) -> None:
        self.operation = operation
        self.resource = resource
        self.layer = layer
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"{operation} on {resource} is not allowed",
            hint=f"the {layer} layer denied {operation} on {resource}{detail}; "
            f"grant it with an ALLOW statement on that layer",
        )


class PlannedActionDecided(LedgerError):
    """A planned action that is no longer PROPOSED (confirmed, rejected or expired) cannot be decided."""

    code = "planned_action_decided"
