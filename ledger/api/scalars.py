"""Custom scalars of the contract: Int64 (JSON, UUID and DateTime come with strawberry)."""

from __future__ import annotations

from typing import Any, NewType

import strawberry
from graphql import IntValueNode, StringValueNode, ValueNode

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _int64(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("Int64 takes a whole number, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text or not (text.lstrip("-").isdigit()) or text.count("-") > 1:
            raise ValueError(f"Int64 takes a whole number or a decimal string, not {value!r}")
        number = int(text)
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
