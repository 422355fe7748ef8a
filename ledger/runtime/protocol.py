"""The wire between the server and an executor: framed JSON messages over a pair of pipes.

A frame is an 8-byte header (envelope length, payload length + 1), a small JSON envelope
(`{"t": kind, ...}`) and an optional payload: the one value that may be large (an event, an output,
a host call's arguments or result), as JSON bytes. Keeping the payload apart lets each side check
its size before building or reading it, and lets the executor produce it with Starlark's own
`json.encode` (see starlark_program) instead of converting values to Python first.

The server encodes with orjson. orjson refuses integers beyond 64 bits (Starlark and the inputs
allow them) and would *decode* them as floats, so such values are encoded with the standard library,
and a payload that orjson reads with a float in it and that holds a run of 19 or more digits is decoded
with the standard library.

Message kinds (server -> executor): run, source, reply, compile.
(executor -> server): ready, need_source, call, done, problems.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import struct
import time
from dataclasses import dataclass
from typing import Any

import orjson

from ..json_floats import holds_float

_HEADER = struct.Struct("!II")
_pack_header = _HEADER.pack

# Envelopes carry kinds, keys, failure texts and bounded logs: never more than this.
MAX_ENVELOPE_BYTES = 1 << 20

# A larger pipe buffer means fewer system calls for a large payload (Linux caps it at
# /proc/sys/fs/pipe-max-size, 1 MiB by default; failure to enlarge is harmless).
_PIPE_BUFFER_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

# A number orjson may not hold exactly (beyond 64 bits) has at least 19 digits; so may a string,
# which merely costs the slower decoder.
_LONG_DIGIT_RUN = re.compile(rb"\d{19}")


class ChannelClosed(Exception):
    """The other end closed its pipe: the peer process ended."""


class ReceiveTimeout(Exception):
    """Nothing (or only part of a frame) arrived before the deadline."""


class FrameTooLarge(Exception):
    """A frame announced more bytes than the receiver accepts; the channel is unusable afterwards."""


class NotJSON(ValueError):
    """A value cannot be represented as JSON."""


def encode_payload(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as error:
        reason = str(error)
        if "64-bit" not in reason and "Recursion" not in reason:
            raise NotJSON(reason) from None
    # Rare path: an integer beyond 64 bits (or nesting deeper than orjson allows).
    _require_string_keys(value)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError) as error:
        raise NotJSON(str(error)) from None


def decode_payload(data: bytes) -> Any:
    """The payload's value, every integer exact.

    Every number orjson reads inexactly (an integer beyond 64 bits) it reads as a float, so a payload it
    reads without a float anywhere is what the standard library would read, and is taken at once; only one
    holding a float, or one orjson refuses, is searched for a long digit run (`_decode_exactly`). The search
    of every payload cost twice the read and the walk for a graphql() call's frame (2.6 against 1.3 µs),
    15 times for a 10 KB string."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _decode_exactly(data)
    return _decode_exactly(data) if holds_float(value) else value


def _decode_exactly(data: bytes) -> Any:
    if _LONG_DIGIT_RUN.search(data):
        return json.loads(data)
    return orjson.loads(data)


def _require_string_keys(value: Any) -> None:
    # The standard library silently turns int keys into strings; orjson (and JSON) would not.
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise NotJSON("Dict key must be str")
                pending.append(child)
        elif isinstance(item, (list, tuple)):
            pending.extend(item)


# Not frozen: a frozen dataclass sets each field through object.__setattr__ (~1 µs a message against ~0.3),
# and each side reads one message a host call; nothing keeps or hashes a message.
@dataclass(slots=True)
class Message:
    envelope: dict
    payload: bytes | None

    @property
    def kind(self) -> str:
        return self.envelope["t"]

    def value(self) -> Any:
        return None if self.payload is None else decode_payload(self.payload)


_READ_BYTES = 1 << 16  # what one read asks for at least


# The envelopes each side sends as constants, encoded once (a host call's, `executor._CALL_ENVELOPES`; a
# successful reply, `lease._REPLY_OK`; a run's done without logs, `executor._DONE_OK_ENVELOPES`): one such
# envelope is recognised by its bytes and read as a fresh copy of its dict, which is what orjson reads from
# those bytes, without the parse (~2.4k instructions a message, one message each way a host call). Any other
# bytes, a constant encoded differently included, are parsed.
_CONSTANT_ENVELOPES: dict[bytes, dict] = {
    orjson.dumps(envelope): envelope
    for envelope in ({"t": "call", "fn": "graphql"}, {"t": "call", "fn": "cel"}, {"t": "call", "fn": "tool"},
                     {"t": "reply", "ok": True}, {"t": "done", "logs": [], "ok": True},
                     {"t": "done", "logs": [], "ok": True, "retire": False},
                     {"t": "done", "logs": [], "ok": True, "retire": True})
}


def _envelope_of(head: bytes) -> dict:
    """The envelope encoded as `head`: a fresh copy of a constant's dict, its `logs` a fresh list (a reader may
    keep or change either), or orjson's parse."""
    constant = _CONSTANT_ENVELOPES.get(head)
    if constant is None:
        return orjson.loads(head)
    envelope = constant.copy()
    if "logs" in constant:
        envelope["logs"] = []
    return envelope


class Channel:
    """One end of the wire. Not thread-safe: exactly one thread talks on a channel at a time."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._buffer = bytearray()
        self._closed = False
        self._poller = select.poll()
        self._poller.register(read_fd, select.POLLIN)
        for fd in (read_fd, write_fd):
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BUFFER_BYTES)
            except OSError:
                pass

    def send(self, envelope: dict, payload: bytes | None = None) -> None:
        self.send_encoded(orjson.dumps(envelope), payload)

    def send_encoded(self, head: bytes, payload: bytes | None = None) -> None:
        """`send` of an envelope already encoded (`orjson.dumps`), e.g. a constant one encoded once."""
        body = payload if payload is not None else b""
        # The payload length is stored plus one so that "no payload" (0) differs from an empty one.
        data = b"".join((_pack_header(len(head), len(body) + (payload is not None)), head, body))
        try:
            # One write: a pipe takes a small frame whole; a large one may take several.
            written = os.write(self._write_fd, data)
            if written < len(data):
                rest = memoryview(data)[written:]
                while rest:
                    rest = rest[os.write(self._write_fd, rest):]
        except BrokenPipeError:
            raise ChannelClosed() from None
        except OSError as error:
            if error.errno in (errno.EPIPE, errno.EBADF):
                raise ChannelClosed() from None
            raise

    def receive(self, deadline: float | None = None, max_payload_bytes: int | None = None) -> Message:
        """Read one message; `deadline` is a time.monotonic() value (None waits for ever)."""
        buffer = self._buffer
        if not buffer:
            # Most messages are the one frame a read brings (the peer wrote it whole and waits for the answer):
            # taken from the read's bytes, without the buffer. Anything else is appended and read below.
            if deadline is not None:
                self._wait_readable(deadline)
            data = os.read(self._read_fd, _READ_BYTES)
            if not data:
                raise ChannelClosed()
            if len(data) >= _HEADER.size:
                envelope_length, stored_payload_length = _HEADER.unpack_from(data)
                envelope_end = _HEADER.size + envelope_length
                if (len(data) == envelope_end + (stored_payload_length - 1 if stored_payload_length else 0)
                        and envelope_length <= MAX_ENVELOPE_BYTES
                        and (max_payload_bytes is None or len(data) - envelope_end <= max_payload_bytes)):
                    return Message(_envelope_of(data[_HEADER.size:envelope_end]),
                                   data[envelope_end:] if stored_payload_length else None)
            buffer += data
        if len(buffer) < _HEADER.size:
            self._fill(_HEADER.size, deadline)
        envelope_length, stored_payload_length = _HEADER.unpack_from(buffer)
        # Conditionals, not max(): the builtin parses its arguments for `key=` (~700 instructions a call).
        payload_length = stored_payload_length - 1 if stored_payload_length else 0
        if envelope_length > MAX_ENVELOPE_BYTES:
            raise FrameTooLarge(f"envelope of {envelope_length} bytes")
        if max_payload_bytes is not None and payload_length > max_payload_bytes:
            raise FrameTooLarge(f"payload of {payload_length} bytes")
        # The whole frame, then its parts, cut from the buffer once (a small frame arrives in one read).
        envelope_end = _HEADER.size + envelope_length
        frame_end = envelope_end + payload_length
        if len(buffer) < frame_end:
            self._fill(frame_end, deadline)
        envelope = _envelope_of(bytes(buffer[_HEADER.size:envelope_end]))
        payload = bytes(buffer[envelope_end:frame_end]) if stored_payload_length else None
        del buffer[:frame_end]
        return Message(envelope, payload)

    def close(self) -> None:
        """Close both ends once (a second close could hit a descriptor number reused meanwhile)."""
        if self._closed:
            return
        self._closed = True
        for fd in {self._read_fd, self._write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass

    def _fill(self, count: int, deadline: float | None) -> None:
        """Read until the buffer holds at least `count` bytes."""
        while len(self._buffer) < count:
            if deadline is not None:
                self._wait_readable(deadline)
            missing = count - len(self._buffer)
            chunk = os.read(self._read_fd, missing if missing > _READ_BYTES else _READ_BYTES)
            if not chunk:
                raise ChannelClosed()
            self._buffer += chunk

    def _wait_readable(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining < 0.0:
            remaining = 0.0
        if not self._poller.poll(remaining * 1000):
            # poll() also reports POLLHUP when the peer is gone; the following read sees EOF.
            raise ReceiveTimeout()
