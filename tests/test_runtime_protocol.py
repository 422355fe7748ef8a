"""The wire format: framing, payload encoding, deadlines and size bounds (no processes involved)."""

from __future__ import annotations

import json
import os
import random
import struct
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
    (`protocol._envelope_of`): the same dict as orjson's parse, a new one each time; other envelopes of
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


def test_a_done_without_logs_is_read_without_a_parse_its_logs_a_list_of_its_own(channels, monkeypatch):
    """The executor's done envelopes of a run that succeeded without a print() line are constants the reader
    recognises by their bytes: the same dict as orjson's parse, and each message's `logs` a new list (a
    `RunOutcome` keeps it; one changed must not change the next)."""
    from ledger.runtime import protocol
    from ledger.runtime.executor import _DONE_OK_ENVELOPES

    a, b = channels
    parsed = []
    real_loads = orjson.loads
    monkeypatch.setattr(protocol.orjson, "loads", lambda data: parsed.append(bytes(data)) or real_loads(data))
    for encoded in _DONE_OK_ENVELOPES.values():
        a.send_encoded(encoded, b"{}")
        a.send_encoded(encoded, b"{}")
        first, second = b.receive(), b.receive()
        assert first.envelope == real_loads(encoded) and list(first.envelope) == list(real_loads(encoded))
        first.envelope["logs"].append("changed")
        assert second.envelope["logs"] == [] and first.envelope is not second.envelope
    assert parsed == []
    a.send({"t": "done", "logs": ["a line"], "ok": True, "retire": False}, b"{}")
    assert b.receive().envelope["logs"] == ["a line"] and len(parsed) == 1


def _frame(head: bytes, payload: bytes | None) -> bytes:
    body = payload if payload is not None else b""
    return struct.pack("!II", len(head), len(body) + (payload is not None)) + head + body


FRAMES = [(b'{"t":"reply","ok":true}', b'{"financial":{"account":{"balance":120}}}'),
          (b'{"t":"call","fn":"graphql"}', b'["{ x }",null,null,true]'),
          (b'{"t":"need_source"}', None), (b'{"t":"reply"}', b""),
          (b'{"t":"done","logs":["x"],"ok":true,"retire":false}', b"[" + b"1," * 100_000 + b"1]")]


def test_a_frame_reads_the_same_whole_in_one_read_in_pieces_or_beside_the_next(channels):
    """A frame that one read brings whole is cut from that read's bytes; one split over reads, or sharing a
    read with the next frame, goes through the buffer: the same messages either way, in order."""
    import threading

    a, b = channels
    expected = [(orjson.loads(head), payload) for head, payload in FRAMES]

    def exchange(writes: list[bytes], count: int) -> list:
        # Written by another thread, a pause after each write, so that each write is a read of its own.
        def write() -> None:
            for data in writes:
                os.write(a._write_fd, data)
                time.sleep(0.02)
        writer = threading.Thread(target=write)
        writer.start()
        try:
            return [(m.envelope, m.payload) for m in (b.receive(time.monotonic() + 5) for _ in range(count))]
        finally:
            writer.join()

    frames = [_frame(head, payload) for head, payload in FRAMES]
    assert exchange(frames, len(frames)) == expected  # one frame a write (the last is larger than a read)
    assert exchange([b"".join(frames)], len(frames)) == expected  # all in one write
    # Each split: the header alone, then part of the envelope, then the rest.
    assert exchange([piece for data in frames for piece in (data[:5], data[5:12], data[12:])], len(frames)) == expected
    # A whole frame and part of the next, then the rest of it.
    assert exchange([frames[0] + frames[1][:10], frames[1][10:]], 2) == expected[:2]


def test_a_frame_over_a_bound_is_refused_when_one_read_brings_it_whole(channels):
    a, b = channels
    os.write(a._write_fd, _frame(b'{"t":"done"}', b"x" * 100))
    with pytest.raises(FrameTooLarge):
        b.receive(time.monotonic() + 1, max_payload_bytes=99)


class _Text(str):
    pass


JSON_TEXTS = ['"plain"', '""', '"é"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"a\\nb\\t\\"\\\\\\/"', '"a\tb"',
              '"\x7f"', '0', '-0', '7', '-7', '9223372036854775807', '-9223372036854775808', '18446744073709551615',
              '18446744073709551616', '-9223372036854775809', '12345678901234567890123', '1.5', '1e5', '1e400', '-0.0',
              'NaN', 'Infinity', '-Infinity', 'true', 'false', 'null', ' 1 ', '\n"x"\r', '\ufeff1', '', '1 2', '01',
              '[1, "a", null]', '{"b": 1, "a": [2, {"c": 3}]}', '{"a": 1, "a": 2}', '[1.0]', '[' * 1100 + ']' * 1100,
              "'a'", '"\\x41"']
JSON_VALUES = ["plain", "", "é", "😀", "\ud800", "a\nb\t\"\\/\x00\x1f\x7f\u2028", _Text("sub"), None, True, False, 0, -7,
               1 << 70, 0.1, 1.5, -0.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308, float("nan"), float("inf"),
               float("-inf"), [1, "a"], {"b": 1, "a": None}, {1: 2}, (1, 2), object()]


def _outcome_of_call(function, *args, **kwargs):
    try:
        value = function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the exception is the answer compared
        return "raised", type(error), str(error)
    return "returned", _typed(value), repr(value)


def test_the_executors_json_functions_answer_as_the_standard_librarys_do():
    """The executor child's `json.loads` and `json.dumps` (starlark-pyo3 converts every scalar through them):
    the same value, type, key order and text, or the same exception, as the standard library's."""
    import json as stdlib_json

    from ledger.runtime.executor import _JSON_DUMPS, _JSON_LOADS, _json_dumps, _json_loads

    assert _JSON_LOADS is stdlib_json.loads and _JSON_DUMPS is stdlib_json.dumps  # this process has the originals
    for text in JSON_TEXTS + [_Text('"sub"')]:
        for argument in (text, text.encode("utf-8", "surrogatepass")):
            assert _outcome_of_call(_json_loads, argument) == _outcome_of_call(_JSON_LOADS, argument), text[:40]
    assert _outcome_of_call(_json_loads, '{"a": 1.5}', parse_float=str) == _outcome_of_call(
        _JSON_LOADS, '{"a": 1.5}', parse_float=str)
    for value in JSON_VALUES:
        assert _outcome_of_call(_json_dumps, value) == _outcome_of_call(_JSON_DUMPS, value), repr(value)
        assert _outcome_of_call(_json_dumps, value, ensure_ascii=False) == _outcome_of_call(
            _JSON_DUMPS, value, ensure_ascii=False), repr(value)
        assert _outcome_of_call(_json_dumps, value, allow_nan=False) == _outcome_of_call(
            _JSON_DUMPS, value, allow_nan=False), repr(value)
