"""Custom scalars of the contract: Int64, and JSON's reading of literals (UUID and DateTime come with
strawberry)."""

from __future__ import annotations

import math
import re
from typing import Any, NewType

import strawberry
from graphql import (FloatValueNode, IntValueNode, ListValueNode, ObjectValueNode, StringValueNode, ValueNode,
                     value_from_ast_untyped)
from strawberry.types.scalar import ScalarDefinition, scalar

from ..errors import LedgerError

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


# ----------------------------------------------------------------------------- JSON

_NONZERO_DIGIT = re.compile(r"[1-9]")


FLOAT_RANGE_HINT = "send a number between about 5e-324 and 1.8e308 in magnitude (or 0), or send it as a string"


def beyond_float_range(text: str, value: float) -> bool:
    """Whether the number written `text`, read as the double `value`, is beyond a double's range: 1e400
    reads as infinity and 1e-400 as zero, neither of them the number that was sent."""
    if not math.isfinite(value):
        return True
    return value == 0 and bool(_NONZERO_DIGIT.search(re.split("[eE]", text, maxsplit=1)[0]))


def _exact_float(text: str) -> None:
    if beyond_float_range(text, float(text)):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise LedgerError(f"the number {shown} is beyond the range of a 64-bit float, so it cannot be kept "
                          "exactly", code="bad_request", hint=FLOAT_RANGE_HINT)


def _json_literal(node: ValueNode, variables: dict | None = None) -> Any:
    """A JSON value written in the document: as graphql-core reads it, but a float literal must fit a
    double (graphql-core would read `1e400` as infinity, which was then stored as the string "inf")."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, FloatValueNode):
            _exact_float(item.value)
        elif isinstance(item, ListValueNode):
            stack.extend(item.values)
        elif isinstance(item, ObjectValueNode):
            stack.extend(field.value for field in item.fields)
    return value_from_ast_untyped(node, variables)


JSON_SCALAR: ScalarDefinition = scalar(
    name="JSON",
    description=("The `JSON` scalar type represents JSON values as specified by [ECMA-404]"
                 "(https://ecma-international.org/wp-content/uploads/ECMA-404_2nd_edition_december_2017.pdf)."),
    specified_by_url="https://ecma-international.org/wp-content/uploads/ECMA-404_2nd_edition_december_2017.pdf",
    serialize=lambda value: value,
    parse_value=lambda value: value,
    parse_literal=_json_literal,
)
