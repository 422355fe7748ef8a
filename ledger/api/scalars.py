"""Custom scalars of the contract: Int64 (JSON, UUID and DateTime come with strawberry)."""

from __future__ import annotations

import re
from typing import Any, NewType

import strawberry
from graphql import IntValueNode, StringValueNode, ValueNode

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# From this magnitude on, a whole float may be a rounded neighbour of the number that was sent.
_EXACT_FLOAT = 2**53
# ASCII digits only: str.isdigit() and int() would also take other scripts' digits ("١٢" is 12).
_DECIMAL = re.compile(r"-?[0-9]+")


def _int64(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("Int64 takes a whole number, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        if abs(value) >= _EXACT_FLOAT:
            # A float this large may already have lost digits (JSON parsers read big numbers as floats).
            raise ValueError(f"{value!r} is too large to be exact as a number; send it as a decimal string")
        number = int(value)
    elif isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError(f"Int64 takes a whole number or a decimal string, not {value!r}")
        number = int(value)
    else:
        raise ValueError(f"Int64 takes a whole number or a decimal string, not {value!r}")
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"{number} does not fit in a 64-bit signed integer")
    return number


def _int64_literal(node: ValueNode, variables: dict | None = None) -> int:
    if isinstance(node, (IntValueNode, StringValueNode)):
        return _int64(node.value)
    raise ValueError("Int64 takes a whole number or a decimal string")


Int64 = strawberry.scalar(
    NewType("Int64", int),
    name="Int64",
    description="64-bit signed integer; output as a JSON number; input as a number or a decimal string",
    serialize=_int64,
    parse_value=_int64,
    parse_literal=_int64_literal,
)
