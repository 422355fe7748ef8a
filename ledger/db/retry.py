"""Running a transaction again when it lost a race (a serialization failure, a deadlock).

A lost race is safe to run again at once: nothing it did committed. The waits are short, jittered (so
that the two losers of one race do not meet again) and capped, and retries stop at the deadline.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from ..errors import Retryable

T = TypeVar("T")


def race_backoff_seconds(retry: int) -> float:
    """The wait before retry n (0-based): up to 5 ms * 2^n, capped at 200 ms, never less than 1 ms."""
    return random.uniform(0.001, min(0.2, 0.005 * 2**retry))


def retry_lost_races(run: Callable[[], T], *, retries: int, deadline: float,
                     may_retry: Callable[[], bool] = lambda: True) -> T:
    """`run()`, run again up to `retries` times while it raises a `Retryable` race, the monotonic
    `deadline` has not passed and `may_retry()` holds. Anything else, or the last race, is raised."""
    for retry in range(retries + 1):
        try:
            return run()
        except Retryable as exc:
            if not exc.race or retry == retries or time.monotonic() >= deadline or not may_retry():
                raise
            time.sleep(race_backoff_seconds(retry))
    raise AssertionError("unreachable")
