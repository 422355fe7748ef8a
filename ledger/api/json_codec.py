"""Reading request bodies and writing responses as JSON, exactly: inputs are stored as received, so no
number may lose digits on the way in, and none may be refused on the way out.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from ..json_floats import holds_float
from .scalars import FLOAT_RANGE_HINT, beyond_float_range

# A run of 19 digits is the shortest text of an integer orjson cannot hold exactly (2**63 has 19); an
# exponent below -307 may underflow a double, which orjson reads silently as 0.0. Either sends the body
# to the standard library (a match inside a string costs only the slower parser).
_LONG_DIGITS = re.compile(rb"[0-9]{19}|[eE]-0*[1-9][0-9]{2}")


def load_json(body: bytes) -> Any:
    """The request body as JSON; ValueError when it is not JSON.

    orjson reads an integer beyond 64 bits as a float, silently dropping digits, so a body that may hold
    one is read by the standard library, which keeps every integer exact (inputs are stored as received).

    Every number orjson reads inexactly (an integer beyond 64 bits, an exponent that underflows) it reads
    as a float, and a body it reads without a float anywhere is read as the standard library reads it: so
    such a body is taken from orjson at once, and only one holding a float (or one orjson refuses) is
    looked at closely (`_load_exactly`). Searching every body for a digit run cost ~33 µs for a 480-byte
    invokeAction (its UUIDs are full of digits), against ~1 µs for orjson's read and ~1 µs for the walk.
    """
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _load_exactly(body)
    if holds_float(value):
        return _load_exactly(body)
    return value


def _load_exactly(body: bytes) -> Any:
    """The body as JSON, read by the standard library when it may hold a number orjson would read inexactly."""
    if not _LONG_DIGITS.search(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the standard library reads a UTF-8 BOM or UTF-16, or says what is wrong
    try:
        value = json.loads(body, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:  # nesting deeper than the stack
        raise ValueError("the JSON is nested too deeply") from None
    if _holds_lone_surrogate(value):
        # `"\ud800"` (or its bytes, read with surrogatepass) parses to a string that is not Unicode text:
        # it could be neither stored (PostgreSQL refuses it) nor written back as UTF-8. orjson refuses it.
        raise ValueError("a string holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), which is not a "
                         "Unicode character")
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a surrogate code point (a pair parses to one character, so any
    left is unpaired), in a string or in a key."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent, which must fit a double (1e999 would be infinity, which
    JSON cannot write back: orjson refuses it too)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a 64-bit float")
    if beyond_float_range(text, value):
        raise ValueError(f"the number {text[:40]} is too small for a 64-bit float (it would read as 0): "
                         f"{FLOAT_RANGE_HINT}")
    return value


def dump_json(payload: Any) -> bytes:
    """A response body: exact for integers beyond 64 bits, and for text orjson refuses."""
    try:
        content = orjson.dumps(payload, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)
    except orjson.JSONEncodeError:
        # An integer beyond 64 bits (an input stored as received): the standard library writes it exactly.
        text = json.dumps(payload, default=str, ensure_ascii=False, separators=(",", ":"))
        try:
            content = text.encode()
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8: write it as a JSON escape
            content = json.dumps(payload, default=str, separators=(",", ":")).encode()
    return content
