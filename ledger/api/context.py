"""Per-request state shared by the resolvers of one GraphQL execution."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import strawberry

from ..errors import LedgerError
from ..scope import Scope

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class RequestContext:
    scope: Scope
    # Set by the first failed mutation field: the request will roll back, so later fields must not run.
    failed: bool = False
    # The response's `extensions.warnings` (DESIGN 16): {field, path, client, message}, in field order.
    warnings: list[dict] = field(default_factory=list)

    def warner(self, info: strawberry.Info) -> Callable[[dict], None]:
        """A registry's `warn` for the field `info` resolves: each warning names the field's response path
        (aliases included), e.g. "actions.createAction" or "actions.w0"."""
        where = ".".join(str(key) for key in info.path.as_list())
        return lambda warning: self.warnings.append({"field": where, **warning})


class NotExecuted(LedgerError):
    code = "not_executed"


def mutation_step(resolver: F) -> F:
    """Run a mutation field only while the request is still healthy, and mark it failed on error.

    Mutation fields run serially in document order; once one fails the whole request rolls back, so
    running later fields would only do work that is thrown away (or fail on an aborted transaction).
    """

    @functools.wraps(resolver)
    def wrapper(self, info: strawberry.Info, *args, **kwargs):
        context: RequestContext = info.context
        if context.failed:
            raise NotExecuted(
                "not executed: an earlier field of this request failed, so the request was rolled back",
                hint="fix the first error and send the request again",
            )
        try:
            return resolver(self, info, *args, **kwargs)
        except BaseException:
            context.failed = True
            raise

    return wrapper  # type: ignore[return-value]
