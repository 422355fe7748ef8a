"""The executionIds the ledger derives itself, keyed so that only the server can compute them.

A child's id must be the same for the same parent, attempt and call sequence (a repeat, another process,
a retried request), yet no client may compute it: one that did could use the id first and make the
parent's call fail on every retry. So ids are an HMAC of those three under a key only the server holds.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..values import uuid_of_int

try:  # CPython's own SHA-256: a copy of its state is a memcpy, where OpenSSL 3's copies a provider context
    from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]
except ImportError:  # another build (or Python 3.12+, where it is _sha2): OpenSSL's, the same digest
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,no-redef]
    except ImportError:
        _sha256 = hashlib.sha256

# The key is derived from the shared signing secret under this label, so that the JWT key itself never
# serves two purposes (every process against one database derives the same key).
CHILD_IDS_LABEL = b"ledger child execution ids"


@dataclass(frozen=True)
class ExecutionIds:
    key: bytes = field(repr=False)
    # HMAC-SHA256 (RFC 2104) under `key` with the key's two padded blocks already absorbed: a copy of each
    # and two updates give the same digest as `hmac.new(key, message, sha256)` (a tree of 1,000 reads
    # derives 1,000 ids) at ~1/4 of its instructions, and ~1/2 of those of a copied `hmac.HMAC`.
    _inner: object = field(init=False, repr=False, compare=False)
    _outer: object = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = self.key if len(self.key) <= _BLOCK else hashlib.sha256(self.key).digest()
        key = key.ljust(_BLOCK, b"\0")
        object.__setattr__(self, "_inner", _sha256(bytes(b ^ 0x36 for b in key)))
        object.__setattr__(self, "_outer", _sha256(bytes(b ^ 0x5C for b in key)))

    def _mac(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    @classmethod
    def from_secret(cls, secret: str) -> "ExecutionIds":
        return cls(hmac.new(secret.encode(), CHILD_IDS_LABEL, hashlib.sha256).digest())

    def child(self, parent: uuid.UUID, attempt: int, sequence: int) -> uuid.UUID:
        """The id of call number `sequence` made by attempt `attempt` of `parent`."""
        return uuid_v8(self._mac(parent.bytes + _TWO_COUNTS.pack(attempt, sequence)))

    def children_of(self, parent: uuid.UUID, attempt: int) -> Callable[[int], uuid.UUID]:
        """`child(parent, attempt, sequence)` as a function of `sequence` alone: the same ids, with the parent's
        and the attempt's bytes absorbed once (a host derives up to 1,024 children of one attempt)."""
        inner = self._inner.copy()
        inner.update(parent.bytes + _COUNT.pack(attempt))  # the message's first 24 bytes, as `child` sends them
        outer, pack = self._outer, _COUNT.pack

        def child(sequence: int) -> uuid.UUID:
            message = inner.copy()
            message.update(pack(sequence))
            mac = outer.copy()
            mac.update(message.digest())
            return uuid_v8(mac.digest())

        return child

    def triggered(self, trigger: uuid.UUID, cause: uuid.UUID, sequence: int) -> uuid.UUID:
        """The id of the run that `trigger` fired as the `sequence`th run of the writing transaction
        `cause` (a nonce of that transaction): no client can know it before the write commits."""
        return uuid_v8(self._mac(b"trigger" + trigger.bytes + cause.bytes + sequence.to_bytes(8, "big")))


def uuid_v8(raw: bytes) -> uuid.UUID:
    """The first 16 bytes of `raw` as an RFC 9562 version 8 (custom) UUID: 122 of their bits, the version and
    the variant."""
    return uuid_of_int(int.from_bytes(raw[:16], "big") & _KEEP | _VERSION_AND_VARIANT)  # 128 bits by construction


_TWO_COUNTS = struct.Struct(">QQ")  # two 8-byte big-endian unsigned counts, as int.to_bytes(8, "big") makes them
_COUNT = struct.Struct(">Q")  # one of them
_BLOCK = 64  # SHA-256's block size, which HMAC pads its key to
_KEEP = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_VERSION_AND_VARIANT = (0x8 << 76) | (0x2 << 62)  # version 8; variant 10 (RFC 4122 / 9562)
