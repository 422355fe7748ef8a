"""Bounds on JSON values that cross into a call: nesting depth, 64-bit integers, storable strings."""

from __future__ import annotations

import json
import math
import re
from typing import Any

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


# A NUL escape in JSON text: `\u0000` after an even number of backslashes (an odd one escapes the `\`).
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def storable_json(value: Any) -> str:
    """JSON text for an execution record that PostgreSQL's jsonb always takes: a NUL character, which it
    cannot store, is recorded as U+FFFD, and NaN or an infinity (not JSON) as the string naming it. What
    a program printed, failed with or was given is recorded even then, instead of the record failing its
    whole request."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        text = json.dumps(_named_non_finite(value), allow_nan=False)
    if "\\u0000" not in text:
        return text
    return _NUL_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text)


def _named_non_finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {key: _named_non_finite(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_named_non_finite(child) for child in value]
    return value
