"""How a model call fails (DESIGN 13): the errors, the scrubbing of secrets out of their messages, and
the runtime's retries of transient failures.

- Transient (HTTP 408, 409, 429, 5xx, a timeout, a lost connection): retried here, up to 3 attempts with
  capped, jittered backoff, unseen by the model; then `model_unavailable` (a started run retries it).
- 401 and 403: the operator's key is refused: `model_unavailable`, not retried (it will not heal by
  itself, and a started run retrying it later is what an operator fixing the key wants).
- Any other 4xx: the provider refused this request (an unknown model name, a context too long, a schema
  it does not take): `model_request_rejected`, with the provider's own (scrubbed) message, because the
  agent's author can act on it and no retry would change it.
- A 2xx answer that is not what the wire format documents: `model_response_invalid`.
"""

from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from ..errors import LedgerError

T = TypeVar("T")
log = logging.getLogger("ledger.models")

ATTEMPTS = 3
BACKOFF_BASE = 0.5
BACKOFF_CAP = 4.0
# An upstream message is quoted in an error up to this length: enough to act on, not a whole HTML page.
MAX_QUOTED = 600


class ModelUnavailable(LedgerError):
    code = "model_unavailable"


class ModelRequestRejected(LedgerError):
    code = "model_request_rejected"


class ModelResponseInvalid(LedgerError):
    code = "model_response_invalid"


class ModelDeadline(LedgerError):
    """The request's deadline passed during a model call."""

    code = "action_response_timeout"


REDACTED = "[redacted]"
# Key-shaped tokens and credential headers, whoever's they are: an upstream body may echo a key we do not
# know (a proxy's), or ours masked in the middle ("sk-abc1****wxyz").
_KEYLIKE = re.compile(
    r"(?i)\b(?:sk|pk|rk|ak)-[A-Za-z0-9_\-*.]{6,}"
    r"|(?i:bearer)\s+[A-Za-z0-9_\-.=:/+*]{6,}"
    r"|(?i:(?:x-api-key|api[-_]?key|authorization|proxy-authorization|cookie|set-cookie)\s*[:=]\s*)"
    r"[\"']?(?:(?i:bearer|basic)\s+)?[^\s\"',;}]{4,}"
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the secrets, key-shaped tokens or credential headers in it."""
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue
        text = text.replace(secret, REDACTED)
        if len(secret) >= 16:
            # A masked echo keeps the key's ends.
            text = text.replace(secret[:8], REDACTED).replace(secret[-8:], REDACTED)
    return _KEYLIKE.sub(REDACTED, text)


def quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "…"


@dataclass(frozen=True)
class Transient(Exception):
    """A failure worth another attempt; `retry_after` is the server's own wait, when it sent one."""

    detail: str
    retry_after: float | None = None


def backoff(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
    if retry_after is not None and 0 <= retry_after <= BACKOFF_CAP:
        return retry_after
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** (attempt - 1)))
    return ceiling / 2 + random.random() * ceiling / 2


def with_retries(attempt: Callable[[float | None], T], *, provider: str, deadline: float | None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> tuple[T, int]:
    """`(attempt(remaining seconds or None), attempts made)`, retrying a `Transient` failure.

    Each attempt is given the time left before `deadline`; no wait outlasts it. Raises
    `model_unavailable` once the attempts are spent, and `ModelDeadline` when the deadline is passed."""
    last: Transient | None = None
    for n in range(1, ATTEMPTS + 1):
        remaining = None if deadline is None else deadline - clock()
        if remaining is not None and remaining <= 0:
            raise _deadline(provider, n - 1, last)
        try:
            return attempt(remaining), n
        except Transient as exc:
            last = exc
            if n == ATTEMPTS:
                break
            wait = backoff(n, exc.retry_after)
            if deadline is not None and clock() + wait >= deadline:
                raise _deadline(provider, n, last) from None
            # The model never sees a retried failure; the operator does (the detail is already scrubbed).
            log.warning("model provider %r: attempt %d of %d failed (%s); retrying in %.2f s",
                        provider, n, ATTEMPTS, exc.detail, wait)
            sleep(wait)
    assert last is not None
    raise ModelUnavailable(
        f"the model provider {provider!r} failed {ATTEMPTS} times: {last.detail}",
        hint="the provider is unreachable or overloaded; try again later (a started run retries this by itself)",
    )


def _deadline(provider: str, attempts: int, last: Transient | None) -> ModelDeadline:
    after = f" after {attempts} attempt{'s' if attempts != 1 else ''} (last: {last.detail})" if last else ""
    return ModelDeadline(
        f"the request's deadline passed during a call of the model provider {provider!r}{after}",
        hint="send a longer Request-Timeout, or start the agent (startAction) for long turns",
    )


class ModelsConfigInvalid(LedgerError):
    """The models file (or a script it names) is not valid: a startup error."""

    code = "models_config_invalid"
