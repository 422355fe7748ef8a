"""How a call fails: `CallFailed` leaves its savepoint, and a failed `graphql()` document keeps or loses its code."""

from __future__ import annotations


class CallFailed(Exception):
    """Leaves a call's savepoint so that its writes roll back."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


# Codes a failed graphql() keeps with check=True: denials, the domain's business rules and call limits.
# Anything else (a document error, a missing record, an uncallable action, ...) is `graphql_error`.
_KEPT_CODES = frozenset({"action_permission_denied", "action_call_limit_exceeded",
                         "insufficient_funds", "currency_mismatch", "invalid_amount", "already_exists"})


def graphql_failure(errors: list[dict]) -> tuple[str, str, str | None]:
    first = errors[0]
    ext = first.get("extensions") or {}
    code = ext.get("code") or "graphql_error"
    if code == "permission_denied":
        code = "action_permission_denied"
    elif code not in _KEPT_CODES:
        code = "graphql_error"
    return code, first.get("message", "the document failed"), ext.get("hint")
