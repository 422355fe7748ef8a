"""A jsonb's text read by `loads_jsonb_text` gives what `json.loads` gives: the same value, exact in type and
digits, or the same error."""

from __future__ import annotations

import json

import pytest

from ledger.db.jsonb import loads_jsonb_text

from helpers import json_read_outcome

JSON_TEXTS = ['{"a": 1, "b": [1.5, -0.0, 1e300, 18446744073709551616123, "Zoë ✓ 𝄞 \\u2028"], "c": null}', "[]", "{}",
              '"text"', '"é"', "12", "-0", "1.0e5", "1e400", "true", "null", ' {"a": 1}', '{"a": 1} ', '{"a": 1} x',
              "\ufeff[]", "[1,", "{", "nul", "", "NaN", '{"a": 1, "a": 2}', '["\\ud800"]',
              "[" * 100_000 + "]" * 100_000]


@pytest.mark.parametrize("text", JSON_TEXTS, ids=range(len(JSON_TEXTS)))
def test_a_jsonb_text_reads_as_json_loads_reads_it(text):
    assert json_read_outcome(loads_jsonb_text, text) == json_read_outcome(json.loads, text)


def test_sql_null_reads_as_none():
    assert loads_jsonb_text(None) is None
