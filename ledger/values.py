"""Bounds on JSON values that cross into a call: nesting depth, 64-bit integers, storable strings; and
the comparison of a repeated call's input with the recorded one."""

from __future__ import annotations

import decimal
import json
import math
import re
import uuid
from typing import Any

import orjson

from .errors import LedgerError

MAX_NESTING = 32
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # unsigned 64-bit is accepted too
_NUL_PROBLEM = "a string holds a NUL character (\\u0000), which cannot be stored"


def value_problem(value: Any) -> tuple[str, str] | None:
    """(path, message) of the first reason `value` cannot be a call's input or output, else None."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                return path or "/", f"nesting deeper than {MAX_NESTING} levels"
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str) and "\x00" in key:
                    return path or "/", _NUL_PROBLEM
                stack.append((child, f"{path}/{key}", depth + 1))
        elif isinstance(item, str):
            if "\x00" in item:
                return path or "/", _NUL_PROBLEM
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                return path or "/", f"the integer {item} does not fit in 64 bits"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path or "/", "NaN and Infinity are not JSON numbers"
        else:
            return path or "/", f"{type(item).__name__} is not a JSON value"
    return None


def require_storable_input(value: Any, where: str = "input") -> None:
    """Refuse, as `bad_request` naming the path, a client's value that the store cannot keep exactly: a
    NUL character (jsonb cannot hold one, and storing U+FFFD instead would make the identical repeat a
    conflict) or a number beyond a double's range. Called before any work, so that nothing is recorded."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    _refuse(where, path or "/", "a key holds a NUL character (\\u0000), which cannot be stored")
                stack.append((child, f"{path}/{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{path}/{index}") for index, child in enumerate(item))
        elif isinstance(item, str):
            if "\x00" in item:
                _refuse(where, path or "/", "a string holds a NUL character (\\u0000), which cannot be stored")
        elif isinstance(item, float) and not math.isfinite(item):
            _refuse(where, path or "/", "the number is beyond a 64-bit float's range (or not a number)")


def _refuse(where: str, path: str, problem: str) -> None:
    raise LedgerError(f"the {where} at {path}: {problem}", code="bad_request",
                      hint=f"change the {where} at {path}: it is stored exactly as sent, or not at all")


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same value: by type (`true` is not `1`, `"1"` is not `1`) and by
    value. Numbers compare by their decimal value, so 1 and 1.0 are one JSON number, as in JSON Schema's
    `const` and in jsonb: a number read back from jsonb may come as int, float or Decimal (1e2 as 100,
    1e300 as a 301-digit integer), and must still equal what the client sent."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if _is_number(x) or _is_number(y):
            if not (_is_number(x) and _is_number(y) and _decimal(x) == _decimal(y)):
                return False
        elif isinstance(x, dict):
            if not isinstance(y, dict) or x.keys() != y.keys():
                return False
            stack.extend((x[key], y[key]) for key in x)
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif type(x) is not type(y) or x != y:  # strings, booleans, null
            return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def _decimal(number: int | float | decimal.Decimal) -> decimal.Decimal:
    # A float's shortest repr is the text json.dumps writes, and so the exact decimal jsonb keeps.
    return decimal.Decimal(repr(number)) if isinstance(number, float) else decimal.Decimal(number)


# A NUL escape in JSON text: `\u0000` after an even number of backslashes (an odd one escapes the `\`).
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def storable_json(value: Any) -> str:
    """JSON text for an execution record that PostgreSQL's jsonb always takes: a NUL character, which it
    cannot store, is recorded as U+FFFD, and NaN or an infinity (not JSON) as the string naming it. What
    a program printed, failed with or was given is recorded even then, instead of the record failing its
    whole request."""
    # orjson writes what json.dumps would, but for its spacing and escapes, which jsonb does not keep (the
    # same values, the same numbers: both write a float's shortest repr), at ~1/10 of the CPU, and escapes
    # a NUL as json.dumps does; only for values `_plain` finds it writes the same (after orjson, which
    # refuses a cycle: the walk then ends). A call tree of 1,000 reads records 1,000 children.
    try:
        fast = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # a big integer, a lone surrogate, a cycle, deep nesting
        fast = None
    if fast is not None and _plain(value):
        text = fast.decode()
    else:
        try:
            text = json.dumps(value, allow_nan=False)
        except ValueError:
            text = json.dumps(_named_non_finite(value), allow_nan=False)
    return _nul_replaced(text)


def storable_json_around(value: Any, open_parts: list) -> str | None:
    """`storable_json`'s text for `value`, whose caller built every part of it but `open_parts` (the values
    it was given) from types orjson writes as the caller means them (e.g. UUIDs and timestamps, which
    json.dumps refuses), so that only `open_parts` need the walk; None when an open part is one that
    orjson writes otherwise than json.dumps, or orjson refuses the value: the caller then writes `value`'s
    parts as text and takes `storable_json`."""
    try:
        text = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # as in storable_json; a cycle ends here, before the walk
        return None
    return _nul_replaced(text.decode()) if _plain(open_parts) else None


def _nul_replaced(text: str) -> str:
    if "\\u0000" not in text:
        return text
    return _NUL_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text)


_INT64 = 2**63


def _plain(value: Any) -> bool:
    """Whether orjson writes `value` as json.dumps would (the same JSON values): dicts with string keys,
    lists, strings, booleans, None, 64-bit integers and finite floats, of those exact types. Anything
    else (a tuple, a subclass, a non-string key, NaN, which orjson would write as null) takes json.dumps."""
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    return False
                push(child)
        elif kind is list:
            extend(item)
        elif kind is int:
            if not -_INT64 <= item < _INT64:
                return False
        elif kind is not float or not math.isfinite(item):
            return False
    return True


def _named_non_finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {key: _named_non_finite(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_named_non_finite(child) for child in value]
    return value


def uuid_of_int(value: int) -> uuid.UUID:
    """`uuid.UUID(int=value)` for a value its caller knows to be 128 bits, without the constructor's argument
    checks (a call tree makes one id per child, and reads one per UUID variable)."""
    made = _new_object(uuid.UUID)
    _set_attribute(made, "int", value)
    _set_attribute(made, "is_safe", _UNKNOWN_SAFETY)
    return made


_new_object = object.__new__
_set_attribute = object.__setattr__  # UUID forbids setting attributes; its own __init__ sets them this way
_UNKNOWN_SAFETY = uuid.SafeUUID.unknown  # read once: an enum member read from its class runs Python code
