"""A jsonb value read as its text, decoded with less work than psycopg's jsonb loader does.

psycopg's loader runs the whole of `json.loads` on bytes for each value (the encoding's detection, the
decode, `raw_decode`'s checks). PostgreSQL writes a jsonb's text with no whitespace around its value, so
the scanner `json.loads` itself runs (`JSONDecoder.raw_decode`'s `scan_once`) can be called on it directly;
anything else, and a standard library without that attribute, goes through `json.loads`, so the value and
any error are the standard library's.
"""

from __future__ import annotations

import json
from typing import Any

_SCAN_ONCE = getattr(json.JSONDecoder(), "scan_once", None)


def loads_jsonb_text(text: str | None) -> Any:
    """`json.loads(text)` of a jsonb's text (None for SQL's null)."""
    if text is None:
        return None
    if _SCAN_ONCE is not None and text and text[0] not in " \t\n\r":
        try:
            value, end = _SCAN_ONCE(text, 0)
        except StopIteration:
            return json.loads(text)  # not JSON: its own error
        if end == len(text):
            return value
    return json.loads(text)
