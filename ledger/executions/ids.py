"""The executionIds the ledger derives itself, keyed so that only the server can compute them.

A child's id must be the same for the same parent, attempt and call sequence (a repeat, another process,
a retried request), yet no client may compute it: one that did could use the id first and make the
parent's call fail on every retry. So ids are an HMAC of those three under a key only the server holds.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass, field

# The key is derived from the shared signing secret under this label, so that the JWT key itself never
# serves two purposes (every process against one database derives the same key).
CHILD_IDS_LABEL = b"ledger child execution ids"


@dataclass(frozen=True)
class ExecutionIds:
    key: bytes = field(repr=False)
    # HMAC-SHA256 under `key` with the key already absorbed: `.copy()` of it and an update give the same
    # digest as `hmac.new(key, message, sha256)` (a tree of 1,000 reads derives 1,000 ids), at ~1/3 of the CPU.
    _keyed: "hmac.HMAC" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keyed", hmac.new(self.key, digestmod=hashlib.sha256))

    @classmethod
    def from_secret(cls, secret: str) -> "ExecutionIds":
        return cls(hmac.new(secret.encode(), CHILD_IDS_LABEL, hashlib.sha256).digest())

    def child(self, parent: uuid.UUID, attempt: int, sequence: int) -> uuid.UUID:
        """The id of call number `sequence` made by attempt `attempt` of `parent`."""
        mac = self._keyed.copy()
        mac.update(parent.bytes + attempt.to_bytes(8, "big") + sequence.to_bytes(8, "big"))
        return uuid_v8(mac.digest()[:16])

    def triggered(self, trigger: uuid.UUID, cause: uuid.UUID, sequence: int) -> uuid.UUID:
        """The id of the run that `trigger` fired as the `sequence`th run of the writing transaction
        `cause` (a nonce of that transaction): no client can know it before the write commits."""
        mac = self._keyed.copy()
        mac.update(b"trigger" + trigger.bytes + cause.bytes + sequence.to_bytes(8, "big"))
        return uuid_v8(mac.digest()[:16])


def uuid_v8(raw: bytes) -> uuid.UUID:
    """16 bytes as an RFC 9562 version 8 (custom) UUID: 122 bits of `raw`, the version and the variant."""
    value = int.from_bytes(raw, "big") & _KEEP | _VERSION_AND_VARIANT
    return uuid.UUID(int=value)


_KEEP = ~((0xF << 76) | (0x3 << 62))
_VERSION_AND_VARIANT = (0x8 << 76) | (0x2 << 62)  # version 8; variant 10 (RFC 4122 / 9562)
