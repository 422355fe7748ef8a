"""The wire format: framing, payload encoding, deadlines and size bounds (no processes involved)."""

from __future__ import annotations

import os
import time

import pytest

from ledger.runtime.protocol import (
    Channel,
    ChannelClosed,
    FrameTooLarge,
    NotJSON,
    ReceiveTimeout,
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
