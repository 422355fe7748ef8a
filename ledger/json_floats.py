"""Whether a value orjson read holds a float: the one test behind every "orjson first" read.

orjson reads every number it cannot hold exactly (an integer beyond 64 bits, an exponent that underflows a
double) as a float, and reads a text without a float anywhere as the standard library does. So a text whose
value holds no float is taken from orjson at once, and only one that does needs the slower, exact read
(`api/json_codec.py` for request bodies, `runtime/protocol.py` for the sandbox pipe's payloads).
"""

from __future__ import annotations

from typing import Any


def holds_float(value: Any) -> bool:
    """Whether a value orjson read holds a float anywhere (its keys are strings)."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return kind is float
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float:
            return True
    return False
