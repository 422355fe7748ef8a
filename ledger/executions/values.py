"""Bounds on JSON values that cross into a call: nesting depth and 64-bit integers."""

from __future__ import annotations

import math
from typing import Any

MAX_NESTING = 32
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1  # unsigned 64-bit is accepted too


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
                stack.append((child, f"{path}/{key}", depth + 1))
        elif isinstance(item, bool) or item is None or isinstance(item, str):
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
