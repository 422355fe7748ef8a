"""JSON Schema checks with jsonschema-rs that never fetch anything: formats on, validators cached by the
schema's canonical text (versions are immutable, so a cache never goes stale).

A schema's dialect is draft 2020-12 unless its root `$schema` names another one the ledger knows
(`DIALECTS`). Any other `$schema` is a problem at write, because the library would otherwise fetch the URI
as a meta-schema (a request forgery whose answer showed in the error). A `$schema` inside a subschema is a
problem too: the whole schema speaks the dialect named at its root. Every validator is built offline, so
`$ref` and `$id` resolve only inside the schema, even for a version stored before these checks.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

import jsonschema_rs
import orjson

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _spellings(address: str) -> list[str]:
    # jsonschema-rs recognizes each dialect over http and https, with or without the empty fragment.
    return [f"{scheme}://{address}{fragment}" for scheme in ("https", "http") for fragment in ("", "#")]


# The dialects a schema may declare, each with the validator that applies it. Draft-07 is here because
# common schema generators (zod-to-json-schema, pydantic v1) emit it; drafts 4 and 6 are not.
DIALECTS: dict[str, type] = {
    **{uri: jsonschema_rs.Draft202012Validator for uri in _spellings("json-schema.org/draft/2020-12/schema")},
    **{uri: jsonschema_rs.Draft201909Validator for uri in _spellings("json-schema.org/draft/2019-09/schema")},
    **{uri: jsonschema_rs.Draft7Validator for uri in _spellings("json-schema.org/draft-07/schema")},
}
_NAMED = ("https://json-schema.org/draft/2020-12/schema (assumed when `$schema` is absent), "
          "https://json-schema.org/draft/2019-09/schema or http://json-schema.org/draft-07/schema#")

# Keywords whose values are subschemas, in any of the dialects above: where a nested `$schema` could be
# read as a keyword (elsewhere, e.g. a property named `$schema` or a `const`, it is just data).
_ONE_SCHEMA = ("additionalProperties", "propertyNames", "contains", "if", "then", "else", "not",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema", "items")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")


def schema_key(schema: Any) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)


def _validator_class(schema: Any) -> type:
    # A stored schema from before the dialect check may name anything: it is validated as 2020-12, offline.
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    return DIALECTS.get(declared, jsonschema_rs.Draft202012Validator) if isinstance(declared, str) \
        else jsonschema_rs.Draft202012Validator


@functools.lru_cache(maxsize=2048)
def _validator(key: bytes):
    schema = orjson.loads(key)
    return _validator_class(schema)(schema, validate_formats=True, offline=True)


def validator_for(schema: Any):
    return _validator(schema_key(schema))


def _subschemas(schema: dict) -> Iterator[tuple[str, Any]]:
    """(relative path, subschema) of every subschema beneath `schema`, depth first."""
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if path:
            yield path, node
        prefix = f"{path}." if path else ""
        for word in _ONE_SCHEMA:
            if isinstance(node.get(word), dict):
                stack.append((f"{prefix}{word}", node[word]))
        for word in _SCHEMA_LISTS:
            if isinstance(node.get(word), list):
                stack.extend((f"{prefix}{word}[{i}]", item) for i, item in enumerate(node[word]))
        for word in _SCHEMA_MAPS:
            if isinstance(node.get(word), dict):
                stack.extend((f"{prefix}{word}.{name}", item) for name, item in node[word].items())


def _dialect_problems(schema: dict) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if "$schema" in schema and (not isinstance(schema["$schema"], str) or schema["$schema"] not in DIALECTS):
        shown = orjson.dumps(schema["$schema"]).decode()
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        found.append(("$schema", f"{shown} is not a JSON Schema dialect the ledger knows, and the ledger fetches "
                                 f"nothing: remove `$schema` or name one of {_NAMED}"))
    for path, node in _subschemas(schema):
        if "$schema" in node:
            found.append((f"{path}.$schema", "a `$schema` inside a schema is not supported: the whole schema "
                                             "speaks the dialect named at its root; remove this one"))
    return found


def schema_problems(schema: Any) -> list[tuple[str, str]]:
    """Why `schema` is not a usable JSON Schema, as (path inside the schema, message); empty when it is."""
    if not isinstance(schema, (dict, bool)):
        return [("", "a JSON Schema is an object (or a boolean)")]
    if isinstance(schema, dict):
        dialect = _dialect_problems(schema)
        if dialect:
            return dialect  # the meta-schema check below must only ever see a dialect it has built in
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path)
        return [("", f"{exc.message}" + (f" (at {where})" if where else ""))]
    except Exception as exc:  # noqa: BLE001 - the library's other errors are just as much the schema's fault
        return [("", str(exc).splitlines()[0])]
    try:
        validator_for(schema)
    except Exception as exc:  # noqa: BLE001 - an unresolvable reference, a bad pattern: the schema's fault
        return [("", str(exc).splitlines()[0])]
    return []


def first_error(schema: Any, instance: Any) -> tuple[str, str] | None:
    """(path, message) of the first way `instance` fails `schema`, or None when it is valid."""
    validator = validator_for(schema)
    for error in validator.iter_errors(instance):
        path = "/" + "/".join(str(p) for p in error.instance_path)
        return path, error.message
    return None
