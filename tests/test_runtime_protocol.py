"""The wire format: framing, payload encoding, deadlines and size bounds (no processes involved)."""

from __future__ import annotations

import json
import os
import random
import time
import uuid

import orjson
import pytest

from ledger.runtime.protocol import (
    Channel,
    ChannelClosed,
    FrameTooLarge,
    NotJSON,
    ReceiveTimeout,
    _decode_exactly,
    decode_payload,
    encode_payload,
)


@pytest.fixture()
def channels():
    a_read, b_write = os.pipe()
    b_read, a_write = os.pipe()
    a, b = Channel(a_read, a_write), Channel(b_read, b_write)
    yield a, b
    a.close()
    b.close()


def test_message_with_and_without_payload(channels):
    a, b = channels
    a.send({"t": "call", "fn": "graphql"}, encode_payload(["{ x }", None]))
    a.send({"t": "need_source"})
    a.send({"t": "reply"}, b"")
    first, second, third = b.receive(), b.receive(), b.receive()
    assert (first.kind, first.value()) == ("call", ["{ x }", None])
    assert (second.kind, second.payload) == ("need_source", None)
    assert third.payload == b""


def test_integers_beyond_64_bits_survive_both_ways():
    value = {"big": 1 << 80, "negative": -(1 << 70), "small": 3, "float": 1.5}
    assert decode_payload(encode_payload(value)) == value
    assert decode_payload(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}


def _typed(value):
    """A decoded value with each number's type beside it (1 == 1.0 == True in Python)."""
    if isinstance(value, dict):
        return {key: _typed(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_typed(child) for child in value]
    return (type(value).__name__, value)


def _random_payload(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False, 0, -1, 2**63 - 1, -2**63, 2**64 - 1, 2**64, -2**63 - 1, 10**30])
    if kind == 1:
        return rng.choice([0.5, -0.0, 1e16, 1e300, 5e-324, 1 / 3, 12345678901234567890.5])
    if kind in (2, 3):
        return rng.choice([str(uuid.uuid4()), "1234567890123456789012", "é😀", ""])
    if kind == 4:
        return rng.randrange(-10**6, 10**6)
    if kind in (5, 6):
        return {f"k{i}": _random_payload(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_random_payload(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_a_payload_decodes_as_the_standard_library_reads_it():
    rng = random.Random(25)
    for _ in range(3000):
        data = json.dumps(_random_payload(rng)).encode()
        assert _typed(decode_payload(data)) == _typed(json.loads(data)), data


@pytest.mark.parametrize("data", [b'{"a": 1, "a": 2.5}', b"[1e2, 100]", b"-0", b'"\\ud800"', b"[NaN]",
                                  b"1e400", b"\xef\xbb\xbf[1]", b"[1,", b'{"a":184467440737095516160}'],
                         ids=["duplicate-key", "exponent", "negative-zero", "lone-surrogate", "nan", "infinity",
                              "bom", "truncated", "big-integer"])
def test_a_payload_orjson_refuses_or_reads_with_a_float_decodes_as_before(data):
    try:
        expected = ("value", _typed(_decode_exactly(data)))
    except ValueError as error:
        expected = ("error", type(error))
    try:
        decoded = ("value", _typed(decode_payload(data)))
    except ValueError as error:
        decoded = ("error", type(error))
    assert decoded == expected


def test_a_payload_without_a_float_is_not_searched_for_digit_runs(monkeypatch):
    from ledger.runtime import protocol

    monkeypatch.setattr(protocol, "_decode_exactly", lambda data: pytest.fail("searched"))
    value = {"id": str(uuid.uuid4()), "variables": {"n": 2**63 - 1, "s": "1234567890123456789012"}}
    assert decode_payload(orjson.dumps(value)) == value


def test_non_string_keys_are_not_json_even_beside_a_big_integer():
    with pytest.raises(NotJSON):
        encode_payload({1: 2})
    with pytest.raises(NotJSON):
        encode_payload([1 << 80, {1: 2}])


def test_receive_times_out_at_the_deadline(channels):
    _, b = channels
    started = time.monotonic()
    with pytest.raises(ReceiveTimeout):
        b.receive(time.monotonic() + 0.05)
    assert time.monotonic() - started < 1


def test_a_payload_over_the_bound_is_refused_before_it_is_read(channels):
    a, b = channels
    a.send({"t": "done"}, b"x" * 1000)
    with pytest.raises(FrameTooLarge):
        b.receive(time.monotonic() + 1, max_payload_bytes=999)


def test_a_closed_peer_is_reported(channels):
    a, b = channels
    a.close()
    with pytest.raises(ChannelClosed):
        b.receive(time.monotonic() + 1)


def test_constant_envelopes_are_read_as_orjson_reads_them_each_a_dict_of_its_own(channels):
    """A host call's and a successful reply's envelope, sent as constants, are recognised by their bytes
    (`protocol._constant_envelope`): the same dict as orjson's parse, a new one each time; other envelopes of
    the same lengths, and the constants' keys in another order, are parsed."""
    from ledger.runtime.executor import _CALL_ENVELOPES
    from ledger.runtime.lease import _REPLY_OK

    a, b = channels
    constants = [*_CALL_ENVELOPES.values(), _REPLY_OK]
    others = [b'{"t":"call","fn":"graphqm"}', b'{"fn":"cel","t":"call"}', b'{"t":"reply","ok":1}',
              b'{"t":"reply","ok":false}', b'{"t":"tool","fn":"call"}']
    for encoded in constants + others:
        for _ in range(2):
            a.send_encoded(encoded, b"[]")
        first, second = b.receive(), b.receive()
        assert first.envelope == orjson.loads(encoded) and list(first.envelope) == list(orjson.loads(encoded))
        assert first.envelope is not second.envelope and first.payload == b"[]"
    a.send_encoded(_REPLY_OK)
    b.receive().envelope["changed"] = True
    a.send_encoded(_REPLY_OK)
    assert b.receive().envelope == {"t": "reply", "ok": True}
