"""Keyset pagination ordered by (created_at, id); the cursor is the id of the last item received."""

from __future__ import annotations

import uuid
from typing import Any, Callable

from ..errors import InvalidInput

MAX_PAGE = 500


def clamp_first(first: int | None, default: int) -> int:
    if first is None:
        return default
    if first < 0:
        raise InvalidInput("`first` cannot be negative", hint="ask for 0 to 500 items")
    return min(first, MAX_PAGE)


def parse_cursor(after: str | None) -> uuid.UUID | None:
    if after is None or after == "":
        return None
    try:
        return uuid.UUID(after)
    except ValueError as exc:
        raise InvalidInput(f"{after!r} is not a cursor this server gave out",
                           hint="pass the id of the last item you received as `after`") from exc


def page_after(scope: Any, table: str, columns: str, first: int, after: str | None, *,
               where: str | None = None, params: tuple = (), id_column: str = "id") -> list[dict]:
    cursor = parse_cursor(after)
    clauses = ["tenant_id = %s"]
    args: list[Any] = [scope.tenant_id]
    if where:
        clauses.append(where)
        args.extend(params)
    if cursor is not None:
        found = scope.one(f"SELECT created_at FROM {table} WHERE tenant_id = %s AND {id_column} = %s LIMIT 1",
                          (scope.tenant_id, cursor))
        if found is None:
            # Without this a mistyped cursor would read as "no more items".
            raise InvalidInput(f"{after!r} is not a cursor of this listing",
                               hint="pass the id of the last item you received as `after`")
        clauses.append(f"(created_at, {id_column}) > (%s, %s)")
        args.extend([found["created_at"], cursor])
    args.append(first)
    sql = (f"SELECT {columns} FROM {table} WHERE {' AND '.join(clauses)}"
           f" ORDER BY created_at, {id_column} LIMIT %s")
    return scope.all(sql, args)


def page_visible(scope: Any, resource: str, table: str, columns: str, first: int, after: str | None, *,
                 where: str | None = None, params: tuple = (), id_column: str = "id",
                 document: Callable[[dict], dict] | None = None) -> list[dict]:
    """Up to `first` rows the chain lets the reader SELECT on `resource`, in (created_at, id) order.
    `document`: the record as policies see it, when that is not the row itself.

    Rows the reader may not see do not count toward the page: reading on past them keeps a short page
    meaning "the end", so a client paging with `after` never stops early.
    """
    visible: list[dict] = []
    cursor = after
    while len(visible) < first:
        batch = min(max(first - len(visible), 100), MAX_PAGE)
        rows = page_after(scope, table, columns, batch, cursor, where=where, params=params, id_column=id_column)
        if document is None:
            visible.extend(scope.visible(resource, rows))
        else:
            visible.extend(row for row in rows if scope.allows("SELECT", resource, document(row)))
        if len(rows) < batch:
            break
        cursor = str(rows[-1][id_column])
    return visible[:first]
