"""Offloaded tool results (DESIGN 13, "Offload"): what a model sees of a large result, and the slices of
it that `read_result` returns.

The rules are pure functions of JSON values, so that the agent's turn and the `read_result` native share
one definition and the tests can assert every rule exactly. Lengths are counted in Unicode code points
(Python `str` length): a preview never splits a character.

A preview keeps the result's shape: an array stays an array, an object keeps every key, a string stays one
string (its middle replaced by a marker inside the same string), so a model reading it learns the
structure it can ask `read_result` for.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import LedgerError

ARRAY_KEPT_WHOLE = 4      # an array of at most this many items keeps every item
ARRAY_HEAD = 3            # items kept from the start of a longer array (and its last one)
STRING_KEPT_WHOLE = 400   # a string of at most this many characters stays whole
STRING_END = 200          # characters kept from each end of a longer string
SUMMARY_DEPTH = 4         # from this depth on, a non-empty array or object becomes a summary
BYTES_PER_TOKEN = 4       # the size estimate: UTF-8 bytes of the compact JSON / 4


def preview(value: Any, depth: int = 0) -> Any:
    """P of section 13: `value` at `depth` (the result itself is at depth 0)."""
    if isinstance(value, list):
        if not value:
            return []
        if depth >= SUMMARY_DEPTH:
            return {"$omitted": f"array of {_count(len(value), 'item', 'items')}"}
        if len(value) <= ARRAY_KEPT_WHOLE:
            return [preview(item, depth + 1) for item in value]
        head = [preview(item, depth + 1) for item in value[:ARRAY_HEAD]]
        return [*head, {"$omitted": len(value) - ARRAY_KEPT_WHOLE}, preview(value[-1], depth + 1)]
    if isinstance(value, dict):
        if not value:
            return {}
        if depth >= SUMMARY_DEPTH:
            return {"$omitted": f"object with {_count(len(value), 'key', 'keys')}"}
        return {key: preview(child, depth + 1) for key, child in value.items()}
    if isinstance(value, str) and len(value) > STRING_KEPT_WHOLE:
        omitted = len(value) - 2 * STRING_END
        return f"{value[:STRING_END]}…({omitted} characters omitted)…{value[-STRING_END:]}"
    return value  # numbers, booleans, null and short strings


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def json_bytes(value: Any) -> int:
    """The size of `value` as compact UTF-8 JSON, the text a model would be sent."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def estimated_tokens(value: Any) -> float:
    return json_bytes(value) / BYTES_PER_TOKEN


def offloaded(execution_id: Any, value: Any, over_tokens: int) -> Any:
    """What the model sees of an AUTO tool's result: the value itself when its estimate is at most
    `over_tokens`, else `{"$offloaded": "<executionId>", "preview": P}`."""
    if json_bytes(value) <= over_tokens * BYTES_PER_TOKEN:  # estimate <= over_tokens, in whole bytes
        return value
    return {"$offloaded": str(execution_id), "preview": preview(value)}


# ---------------------------------------------------------------------------- read_result


class ReadResultInvalid(LedgerError):
    code = "action_input_invalid"


def read_slice(value: Any, path: str | None = None, offset: int | None = None, limit: int | None = None) -> Any:
    """The bare value `read_result` returns: the part of `value` at the JSON pointer `path` (RFC 6901),
    then `offset` and `limit` applied to that array or string."""
    target = resolve_pointer(value, path or "")
    if offset is None and limit is None:
        return target
    for name, number in (("offset", offset), ("limit", limit)):
        if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 0):
            raise ReadResultInvalid(f"{name} must be a whole number of 0 or more, not {number!r}",
                                    hint=f"send {name} as an integer index (0 is the first item or character)")
    if not isinstance(target, (list, str)):
        kind = "an object" if isinstance(target, dict) else f"a {_json_type(target)}"
        raise ReadResultInvalid(f"offset and limit apply to an array or a string; the value at "
                                f"{_where(path)} is {kind}",
                                hint="point `path` at an array or a string, or read it without offset and limit"
                                     + (" (a key of an object is one more pointer segment, e.g. /items)"
                                        if isinstance(target, dict) else ""))
    start = offset or 0
    end = None if limit is None else start + limit
    return target[start:end]


def resolve_pointer(value: Any, pointer: str) -> Any:
    """The value `pointer` names in `value`: "" is the whole value, "/a/0" the first item of key a; `~1`
    is a "/" inside a key and `~0` a "~"."""
    if pointer == "":
        return value
    if not pointer.startswith("/"):
        raise ReadResultInvalid(f"{pointer!r} is not a JSON pointer: it starts with \"/\" (or is empty for the "
                                "whole result)", hint='write e.g. "/items/0/name"; escape "/" in a key as ~1 and '
                                                      '"~" as ~0')
    current = value
    walked = ""
    for raw in pointer[1:].split("/"):
        if "~" in raw.replace("~0", "").replace("~1", ""):
            raise ReadResultInvalid(f"{pointer!r}: {raw!r} holds a \"~\" that is neither ~0 nor ~1",
                                    hint='escape "~" in a key as ~0 and "/" as ~1')
        token = raw.replace("~1", "/").replace("~0", "~")  # ~1 first: "~01" is the key "~1"
        if isinstance(current, dict):
            if token not in current:
                raise _missing(pointer, walked, f"the object has no key {token!r}")
            current = current[token]
        elif isinstance(current, list):
            if not (token.isdigit() and token.isascii()) or (len(token) > 1 and token[0] == "0"):
                raise _missing(pointer, walked, f"{token!r} is not an array index (0, 1, 2, ...)")
            index = int(token)
            if index >= len(current):
                raise _missing(pointer, walked, f"index {index} is past the end of an array of {len(current)}")
            current = current[index]
        else:
            raise _missing(pointer, walked, f"a {_json_type(current)} has no members")
        walked += "/" + raw
    return current


def _missing(pointer: str, walked: str, why: str) -> LedgerError:
    return LedgerError(f"the result has nothing at {pointer!r}: at {_where(walked)}, {why}",
                       code="not_found",
                       hint="read the preview (or the value at a shorter path) to see which keys and indexes exist")


def _where(pointer: str | None) -> str:
    return repr(pointer) if pointer else "the root"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
