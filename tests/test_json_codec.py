"""Request bodies read exactly (ledger/api/json_codec.py `load_json`): a body orjson reads without a float
is taken from orjson; any other goes the careful way (`_load_exactly`), so that no number loses a digit.
Each body here is read both ways, which must agree value for value and type for type."""

from __future__ import annotations

import json

import pytest

from ledger.api.json_codec import _load_exactly, load_json


def _typed(value):
    """A value with every number's type beside it: 1 and 1.0 (and True) compare equal in Python."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


BODIES = [
    b'{"query": "{ viewer { tenantId } }"}',
    b'{"variables": {"id": "0d3b5a62-1234-4567-8901-234567890123", "n": 1234567890123456789012}}',
    b'{"x": 18446744073709551615, "y": -9223372036854775808}',   # the 64-bit extremes orjson holds
    b'{"x": 18446744073709551616}',                                # one beyond: orjson would make it a float
    b'{"x": [1, [2, {"z": -9223372036854775809}]]}',
    b'{"x": 1.5, "y": 10, "z": [0.1, 2e-3]}',
    b'{"s": "12345678901234567890 in a string", "e": "e-400"}',
    b'{"a": 1, "a": 2, "b": true, "c": null}',
    b'"just a string"', b'17', b'17.0', b'[]',
    b'\xef\xbb\xbf{"bom": 1}',
]


@pytest.mark.parametrize("body", BODIES)
def test_a_body_reads_as_the_careful_reading_reads_it(body):
    assert _typed(load_json(body)) == _typed(_load_exactly(body))


def test_integers_beyond_64_bits_keep_every_digit():
    assert load_json(b'{"x": [1, {"y": 1180591620717411303424}]}') == {"x": [1, {"y": 2 ** 70}]}
    assert load_json(b'[-18446744073709551617, 2]') == [-(2 ** 64) - 1, 2]


@pytest.mark.parametrize("body", [b'{"x": NaN}', b'{"x": 1e999}', b'{"x": 1e-400}', b'{"x": "\\ud800"}', b'{"x": ', b'',
                                  b'[1,]'])
def test_what_is_not_json_is_refused_both_ways(body):
    with pytest.raises(ValueError):
        load_json(body)
    with pytest.raises(ValueError):
        _load_exactly(body)


def _outcome(read, body):
    try:
        return json.dumps(read(body))
    except ValueError as error:
        return f"refused: {error}"


@pytest.mark.parametrize("depth", [600, 1100])
def test_a_deeply_nested_body_reads_or_is_refused_the_same_either_way(depth):
    """orjson refuses nesting past 1,024 levels, the standard library past its recursion limit."""
    body = (b"[" * depth) + (b"]" * depth)
    assert _outcome(load_json, body) == _outcome(_load_exactly, body)
