"""Running one GraphQL document on a scope, and shaping what went wrong: the one place for both.

The HTTP endpoint and a program's `graphql()` run documents the same way and report errors in the same
shape, so a change here changes both. What differs is only who is told: the HTTP path answers the
request; `graphql()` hands `(data, errors)` to the call engine (`GraphQLDocuments` is its runner).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from graphql import GraphQLError, OperationDefinitionNode, parse
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError

from ..db.pool import as_ledger_error, transient_failure
from ..errors import LedgerError, Retryable
from ..scope import Scope
from .context import RequestContext

log = logging.getLogger("ledger.http")

DOCUMENT_HINT = "check the document and its variables against the schema (see GraphiQL)"


def error_payload(message: str, code: str, hint: str | None = None, **extra: Any) -> dict:
    ext: dict[str, Any] = {"code": code}
    if hint:
        ext["hint"] = hint
    ext.update(extra)
    return {"message": message, "extensions": ext}


def format_error(error: GraphQLError) -> dict:
    original = _translated(error.original_error)
    out: dict[str, Any] = {"message": error.message}
    if error.locations:
        out["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    if error.path:
        out["path"] = list(error.path)
    if isinstance(original, LedgerError):
        out["message"] = original.message
        out["extensions"] = original.as_extensions()
    elif is_document_error(error):
        out["extensions"] = {"code": "graphql_validation_failed", "hint": DOCUMENT_HINT}
    else:
        log.exception("unexpected error in a resolver", exc_info=original)
        out["message"] = "internal error: the request was rolled back"
        out["extensions"] = {"code": "internal_error",
                             "hint": "this is a bug in the ledger; the request changed nothing"}
    return out


def _translated(original: Any) -> Any:
    """A database error the caller can act on (a NUL it sent) as its LedgerError; anything else as is."""
    if isinstance(original, psycopg.Error):
        translated = as_ledger_error(original)
        if isinstance(translated, LedgerError):
            return translated
    return original


def is_document_error(error: GraphQLError) -> bool:
    """A syntax, validation or variable-coercion error: the document or its variables are wrong.

    These carry no path (no field ran); a variable that fails a scalar's coercion carries the scalar's
    ValueError/TypeError or a GraphQLError subclass (strawberry's StrawberryInputCoercionError).
    """
    original = error.original_error
    return original is None or (
        not error.path and isinstance(original, (ValueError, TypeError, GraphQLError))
        and not isinstance(original, LedgerError))


def first_retryable(errors: list[GraphQLError]) -> Retryable | None:
    """A transient database failure anywhere fails the whole request as `retryable`."""
    for error in errors:
        retry = transient_failure(error.original_error)
        if retry is not None:
            return retry
    return None


@functools.lru_cache(maxsize=1024)
def operation_count(document: str) -> int:
    """How many operations a document defines (strawberry would silently run the first of several)."""
    try:
        parsed = parse(document, no_location=True, max_tokens=20_000)
    except GraphQLError:
        return 1  # the execution reports the syntax error
    return sum(isinstance(d, OperationDefinitionNode) for d in parsed.definitions)


class DocumentRejected(LedgerError):
    """The document cannot run at all: empty, several unnamed operations, a subscription."""

    code = "graphql_validation_failed"

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message, hint=hint)


@dataclass(frozen=True)
class Caller:
    """How the caller names what it sent: HTTP clients send `operationName`, programs `operation_name`."""

    operation_name_argument: str
    runs: str  # who runs only queries and mutations, for the message
    hint: str

    @functools.cached_property
    def several(self) -> str:
        """The message for a document of several operations and no name (made once, not per document)."""
        return f"the document has several operations: name the one to run with {self.operation_name_argument}"


HTTP = Caller("`operationName`", "this server", DOCUMENT_HINT)
PROGRAM = Caller("`operation_name`", "graphql()", "check the document and its variables against the schema")


def execute(schema: Any, scope: Scope, document: str, variables: dict | None, operation_name: str | None,
            caller: Caller, context: RequestContext | None = None) -> Any:
    """The graphql-core ExecutionResult of `document` on the scope's transaction; DocumentRejected when it
    cannot run at all. `context`: the resolvers' shared state, for a caller that reads it afterwards (the
    HTTP path answers its warnings)."""
    if operation_name is None and operation_count(document) > 1:
        raise DocumentRejected(caller.several, caller.hint)
    try:
        return schema.execute_sync(document, variable_values=variables, context_value=context or RequestContext(scope),
                                   operation_name=operation_name)
    except MissingQueryError:
        raise DocumentRejected("the document is empty", caller.hint) from None
    except CannotGetOperationTypeError:
        raise DocumentRejected(f"the document has no operation named {operation_name!r}" if operation_name
                               else caller.several, caller.hint) from None
    except InvalidOperationTypeError:
        raise DocumentRejected(f"{caller.runs} runs queries and mutations only", caller.hint) from None


class GraphQLDocuments:
    """The call engine's GraphQL runner: a program's `graphql()` under the program's scope.

    A transient database failure (or any `Retryable`) is raised, never returned: a program cannot swallow
    it with `check=False`, and the request is retried as a whole. So is a database error the program did
    not cause, which fails the request as the bug it is.
    """

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        # The ledger's schema answers a planned document directly (api/schema.py `run_planned`): what
        # `execute` would answer, without its steps around the plan (a tree of reads sends one a thousand times).
        self._run_planned = getattr(schema, "run_planned", None)

    def __call__(self, scope: Scope, document: str, variables: dict | None,
                 operation_name: str | None) -> tuple[Any, list[dict] | None]:
        planned = None
        if self._run_planned is not None and type(document) is str:
            planned = self._run_planned(document, variables, RequestContext(scope), operation_name)
        if planned is not None:
            data, errors = planned
        else:
            try:
                result = execute(self.schema, scope, document, variables, operation_name, PROGRAM)
            except DocumentRejected as rejected:
                return None, [error_payload(rejected.message, rejected.code, rejected.hint)]
            data, errors = result.data, result.errors
        if not errors:
            return data, None
        retry = first_retryable(errors)
        if retry is not None:
            raise retry
        for error in errors:
            original = error.original_error
            if isinstance(original, psycopg.Error) and not isinstance(as_ledger_error(original), LedgerError):
                raise original
        return data, [format_error(e) for e in errors]
