"""JSON text as the standard library writes it (`json.dumps` with compact separators), written by orjson
where the two agree: the MCP SDK's wire is the standard library's, and the ledger's answers must be it byte
for byte, but orjson writes a small value several times faster. Whether they agree turns on the value's
types and floats (`floats_in_json`), which also tell whether pydantic's JSON mode gives a value back as it
is (`exchange.shaped_tool_result`)."""

from __future__ import annotations

import math
from typing import Any

import orjson


def orjson_text(value: Any, *, ascii_only: bool) -> bytes | None:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)`'s text (UTF-8), written by orjson;
    None where orjson would write otherwise: a float (its shortest text differs: 1e+16 against 1e16), a
    value not of JSON's own types, an integer beyond 64 bits, a lone surrogate, or, with `ascii_only`, text
    that is not ASCII or holds DEL (the standard library escapes both, orjson writes them as they are)."""
    if floats_in_json(value) is not False:
        return None
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return None
    if ascii_only and not (text.isascii() and b"\x7f" not in text):
        return None
    return text


def floats_in_json(value: Any) -> bool | None:
    """None unless a value is of JSON's own types, as pydantic's JSON mode gives them back equal and in the
    same order (dicts with string keys, lists, strings, integers, finite floats, booleans and nulls);
    otherwise whether it holds a float."""
    holds_float = False
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return None
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return None
            holds_float = True
        elif kind is not str and kind is not int and kind is not bool and item is not None:
            return None
    return holds_float
