"""JSON read exactly, at orjson's speed when orjson reads it exactly.

orjson reads an integer beyond 64 bits, or a number whose exponent underflows, as a float that has lost
digits, silently; the standard library keeps every integer exact. Every number orjson reads inexactly
it reads as a float, so a text it reads without a float anywhere reads as the standard library reads it:
only a text holding a float (rare in the ledger's records and inputs), or one orjson refuses (nesting
past 1,024 levels, an infinity), is read again by the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def holds_float(value: Any) -> bool:
    """Whether a value read by orjson holds a float anywhere (its keys are strings)."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return kind is float
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float:
            return True
    return False


def loads_exactly(data: bytes | bytearray | memoryview | str) -> Any:
    """`json.loads(data)`, the same value of the same types, read by orjson when that is exact."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
    if holds_float(value):
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
    return value
