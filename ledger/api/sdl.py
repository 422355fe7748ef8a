"""The schema's SDL, as `ledger schema` prints it and `schema.graphql` holds it."""

from __future__ import annotations


def schema_sdl() -> str:
    from .schema import schema

    return schema.as_str().rstrip("\n") + "\n"
