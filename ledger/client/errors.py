"""What the client raises: an error the server answered, or the exchange failed with."""

from __future__ import annotations

from ..errors import LedgerError


class LedgerRequestError(LedgerError):
    """An error the server answered (or the exchange failed with): code, message, hint, problems.

    `errors` holds every GraphQL error of the response (the first is this one); `problems` the
    `extensions.problems` of a definition or input error, each `{path, message}`.
    """

    def __init__(self, message: str, *, code: str, hint: str | None = None, problems: list[dict] | None = None,
                 retryable: bool = False, path: list | None = None, errors: list[dict] | None = None,
                 status: int | None = None, extensions: dict | None = None) -> None:
        super().__init__(message, code=code, hint=hint, extensions=extensions)
        self.problems = list(problems or [])
        self.retryable = retryable
        self.path = path
        self.errors = list(errors or [])
        self.status = status

    @classmethod
    def from_graphql(cls, errors: list[dict], status: int | None = None) -> "LedgerRequestError":
        first = errors[0] if errors and isinstance(errors[0], dict) else {"message": str(errors)}
        ext = first.get("extensions") or {}
        return cls(first.get("message") or "the server answered an error", code=ext.get("code") or "error",
                   hint=ext.get("hint"), problems=ext.get("problems"), retryable=bool(ext.get("retryable")),
                   path=first.get("path"), errors=errors, status=status, extensions=ext)

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        for problem in self.problems:
            text += f"\n  {problem.get('path')}: {problem.get('message')}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class WaitTimeout(LedgerRequestError, TimeoutError):
    """`wait` gave up before the execution reached a final status."""
