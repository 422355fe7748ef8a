"""An execution record's JSON (ledger/values.py storable_json): what jsonb takes, the same values whichever
encoder writes it, a NUL recorded as U+FFFD and NaN or an infinity as the string naming it."""

from __future__ import annotations

import json
import random

from ledger.values import _NUL_ESCAPE, storable_json


def _reference(value):
    """What storable_json wrote with json.dumps alone (the values generated here are all finite)."""
    text = json.dumps(value, allow_nan=False)
    return json.loads(_NUL_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text))


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, -2**63, 2**53 + 1, rng.randrange(-10**6, 10**6)])
    if kind == 2:
        return rng.choice([0.1, -0.0, 1e16, 1.7976931348623157e308, 5e-324, 1 / 3, rng.random() * 10**rng.randrange(-30, 30)])
    if kind in (3, 4, 5):
        return "".join(rng.choice(["a", "é", "\u2028", "\"", "\\", "\n", "\x01", "😀", "\\u0000", "\x00"]) for _ in range(rng.randrange(6)))
    if kind in (6, 7):
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_a_record_holds_the_values_json_dumps_would_write():
    rng = random.Random(18)
    for _ in range(3000):
        value = _random_value(rng)
        assert json.loads(storable_json(value)) == _reference(value), value


def test_a_nul_character_is_recorded_as_the_replacement_character():
    assert json.loads(storable_json({"logs": ["a\x00b"], "escaped": "\\u0000"})) == {"logs": ["a\ufffdb"],
                                                                                   "escaped": "\\u0000"}


def test_nan_and_infinities_are_recorded_as_the_strings_naming_them():
    assert json.loads(storable_json({"v": [float("nan"), float("inf"), -float("inf"), 1.5]})) == {
        "v": ["nan", "inf", "-inf", 1.5]}


def test_integers_beyond_64_bits_tuples_and_non_string_keys_are_recorded_as_json_dumps_writes_them():
    value = {"big": 2**64 + 1, "tuple": (1, 2), 3: "three", "nested": [{"t": True}]}
    assert json.loads(storable_json(value)) == {"big": 2**64 + 1, "tuple": [1, 2], "3": "three",
                                                 "nested": [{"t": True}]}


def test_a_lone_surrogate_is_written_as_json_dumps_escapes_it():
    assert storable_json(["\ud800"]) == '["\\ud800"]'


def test_a_float_keeps_its_shortest_digits():
    for number in (0.1, 1e16, 1.7976931348623157e308, 5e-324, 1 / 3, 2.5e-8, 123456789.123456789):
        assert json.loads(storable_json([number]))[0] == number
        assert repr(float(storable_json([number])[1:-1])) == repr(number)
