"""The caller of a request: who they are, and the first layer of their policy chain."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Principal:
    tenant_id: uuid.UUID
    client_id: uuid.UUID
    client_name: str
    claims: dict[str, Any] = field(default_factory=dict)

    def as_cel(self) -> dict[str, Any]:
        """`principal` as policy assertions see it."""
        return {"tenant": str(self.tenant_id), "client": str(self.client_id), "claims": self.claims}
