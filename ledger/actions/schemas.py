"""JSON Schema (draft 2020-12) checks with jsonschema-rs: never fetching a remote `$ref`, formats on,
validators cached by the schema's canonical text (versions are immutable, so a cache never goes stale).
"""

from __future__ import annotations

import functools
from typing import Any

import jsonschema_rs
import orjson


def schema_key(schema: Any) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)


@functools.lru_cache(maxsize=2048)
def _validator(key: bytes) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(orjson.loads(key), validate_formats=True, offline=True)


def validator_for(schema: Any) -> jsonschema_rs.Draft202012Validator:
    return _validator(schema_key(schema))


def schema_problems(schema: Any) -> list[str]:
    """Why `schema` is not a usable draft 2020-12 schema; empty when it is."""
    if not isinstance(schema, (dict, bool)):
        return ["a JSON Schema is an object (or a boolean)"]
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path)
        return [f"{exc.message}" + (f" (at {where})" if where else "")]
    except Exception as exc:  # noqa: BLE001 - the library's other errors are just as much the schema's fault
        return [str(exc).splitlines()[0]]
    try:
        validator_for(schema)
    except (jsonschema_rs.ValidationError, ValueError, Exception) as exc:  # noqa: BLE001
        return [str(exc).splitlines()[0]]
    return []


def first_error(schema: Any, instance: Any) -> tuple[str, str] | None:
    """(path, message) of the first way `instance` fails `schema`, or None when it is valid."""
    validator = validator_for(schema)
    for error in validator.iter_errors(instance):
        path = "/" + "/".join(str(p) for p in error.instance_path)
        return path, error.message
    return None
