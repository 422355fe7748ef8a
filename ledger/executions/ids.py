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

    @classmethod
    def from_secret(cls, secret: str) -> "ExecutionIds":
        return cls(hmac.new(secret.encode(), CHILD_IDS_LABEL, hashlib.sha256).digest())

    def child(self, parent: uuid.UUID, attempt: int, sequence: int) -> uuid.UUID:
        """The id of call number `sequence` made by attempt `attempt` of `parent`."""
        message = parent.bytes + attempt.to_bytes(8, "big") + sequence.to_bytes(8, "big")
        return uuid_v8(hmac.new(self.key, message, hashlib.sha256).digest()[:16])

    def triggered(self, trigger: uuid.UUID, cause: uuid.UUID, sequence: int) -> uuid.UUID:
        """The id of the run that `trigger` fired as the `sequence`th run of the writing transaction
        `cause` (a nonce of that transaction): no client can know it before the write commits."""
        message = b"trigger" + trigger.bytes + cause.bytes + sequence.to_bytes(8, "big")
        return uuid_v8(hmac.new(self.key, message, hashlib.sha256).digest()[:16])


def uuid_v8(raw: bytes) -> uuid.UUID:
    """16 bytes as an RFC 9562 version 8 (custom) UUID: 122 bits of `raw`, the version and the variant."""
    value = int.from_bytes(raw, "big")
    value &= ~(0xF << 76)
    value |= 0x8 << 76  # version 8
    value &= ~(0x3 << 62)
    value |= 0x2 << 62  # variant 10 (RFC 4122 / 9562)
    return uuid.UUID(int=value)
