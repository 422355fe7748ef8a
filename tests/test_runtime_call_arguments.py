"""A graphql() call's arguments read by orjson alone (runtime/lease.py `_plain_graphql_arguments`) are the
arguments the exact decode and the type checks give (`_checked_arguments`), or left to those."""

from __future__ import annotations

import json

import orjson

from ledger.runtime.lease import _call_arguments, _checked_arguments, _plain_graphql_arguments
from ledger.runtime.protocol import Message

DOCUMENT = "query($id: UUID!) { financial { account(id: $id) { balance } } }"

PAYLOADS = [
    orjson.dumps([DOCUMENT, {"id": "3f0c1d2e-1111-4222-8333-444455556666"}, None, True]),
    orjson.dumps([DOCUMENT, None, None, False]),
    orjson.dumps([DOCUMENT, {}, "Named", True]),
    orjson.dumps([DOCUMENT, {"n": 7, "b": False, "s": "x", "z": None, "big": (1 << 63) - 1}, None, True]),
    orjson.dumps([DOCUMENT, {"n": -(1 << 63)}, None, True]),
    json.dumps([DOCUMENT, {"n": 1 << 64}, None, True]).encode(),  # beyond 64 bits: orjson reads a float
    json.dumps([DOCUMENT, {"n": 18446744073709551616123}, None, True]).encode(),
    orjson.dumps([DOCUMENT, {"f": 1.5}, None, True]),
    orjson.dumps([DOCUMENT, {"f": 2.0}, None, True]),
    b'["{ x }", {"f": 1e999}, null, true]',
    orjson.dumps([DOCUMENT, {"nested": {"f": 1.5}}, None, True]),
    orjson.dumps([DOCUMENT, {"nested": {"n": 1}}, None, True]),
    orjson.dumps([DOCUMENT, {"list": [1, 2]}, None, True]),
    orjson.dumps([DOCUMENT, [], None, True]),
    orjson.dumps([DOCUMENT, {}, 7, True]),
    orjson.dumps([DOCUMENT, {}, None, 1]),
    orjson.dumps([DOCUMENT, {}, None, None]),
    orjson.dumps([7, {}, None, True]),
    orjson.dumps([DOCUMENT, {}, None]),
    orjson.dumps([DOCUMENT, {}, None, True, True]),
    orjson.dumps({"document": DOCUMENT}),
    orjson.dumps(DOCUMENT),
    b"[1.5, null, null, true]",
    b'["{ x }", {"a": 1}, null, true',
    b"not json",
    b"",
    json.dumps(["{ x }", {"a": float("nan")}, None, True]).encode(),
]


def test_plain_arguments_are_the_checked_arguments():
    for payload in PAYLOADS:
        message = Message({"t": "call", "fn": "graphql"}, payload)
        checked = _checked_arguments("graphql", message)
        plain = _plain_graphql_arguments(payload)
        if plain is not None:
            assert plain == checked and [type(item) for item in plain] == [type(item) for item in checked], payload
            assert repr(plain) == repr(checked), payload
        assert repr(_call_arguments("graphql", message)) == repr(checked), payload


def test_variables_that_could_hold_a_float_are_left_to_the_exact_decode():
    for variables in ({"f": 1.5}, {"nested": {"n": 1}}, {"list": [1]}, {"n": 1 << 64}):
        payload = json.dumps(["{ x }", variables, None, True]).encode()
        assert _plain_graphql_arguments(payload) is None


def test_a_call_without_a_payload_is_malformed_either_way():
    message = Message({"t": "call", "fn": "graphql"}, None)
    assert _plain_graphql_arguments(None) is None
    assert _call_arguments("graphql", message) is None


def test_a_runs_envelope_is_what_orjson_writes_for_its_dict_each_program_its_own_key():
    """`_run_envelope` keeps each program's encoded head: the bytes equal `orjson.dumps` of the whole envelope,
    and a program whose key is reused with another source, tool names or mode gets its own cache key."""
    import orjson

    from ledger.runtime.interface import Program
    from ledger.runtime.lease import _cache_key, _run_envelope

    programs = [Program(("t", "a", 1), "def run(event):\n    return 1\n"),
                Program(("t", "a", 1), "def run(event):\n    return 2\n"),
                Program(("t", "a", 1), "def run(event):\n    return 2\n", ("x",)),
                Program(("t", "a", 1), "def run():\n    return 2\n", ("x",), code_mode=True, natives=("cel",)),
                Program(("t", 'quote " and é', 2), "def run(event):\n    return 1\n"),
                Program((["an", "unhashable", "key"],), "def run(event):\n    return 1\n")]
    for deadline in (12345.678901234, 0.5, 7.0):
        for program in programs * 2:
            envelope = _run_envelope(program, deadline)
            assert envelope == orjson.dumps({"t": "run", "key": _cache_key(program), "deadline": deadline})
            assert orjson.loads(envelope)["deadline"] == deadline
    assert len({orjson.loads(_run_envelope(program, 1.0))["key"] for program in programs}) == len(programs)
