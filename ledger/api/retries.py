"""The server's own bounded retries of a request that lost a race (DESIGN 3), for every endpoint.

Everything a request does is deterministic given the database, so a request whose transaction lost a
race (serialization failure, deadlock) runs again in a new transaction, a bounded number of times,
with a capped and jittered backoff, and never past its deadline.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from ..config import Settings
from ..errors import Retryable

T = TypeVar("T")


def with_retries(settings: Settings, deadline: float, once: Callable[[], T]) -> T:
    """`once()`, run again while it raises a race's `Retryable`; the last `Retryable` is raised."""
    attempts = settings.race_retries + 1
    for attempt in range(attempts):
        try:
            return once()
        except Retryable as exc:
            if attempt + 1 < attempts and exc.race and time.monotonic() < deadline:
                time.sleep(random.uniform(0.001, min(0.2, 0.005 * 2**attempt)))
                continue
            raise
    raise AssertionError("unreachable")
