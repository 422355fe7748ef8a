"""What the official SDKs (`openai`, `anthropic`) share: the same exception classes, turned here into
ours (module docstring of `failures`), with every message scrubbed."""

from __future__ import annotations

import time
from typing import Any, Callable

from .failures import ModelRequestRejected, ModelResponseInvalid, ModelUnavailable, Transient, quoted, scrub

TRANSIENT_STATUS = frozenset({408, 409, 429})


def call(sdk: Any, provider: str, secrets: tuple[str, ...], send: Callable[[], Any]) -> tuple[dict, int]:
    """`(the JSON body of a 2xx answer, latency ms)` of one attempt; raises `Transient` or ours."""
    started = time.monotonic()
    try:
        raw = send()
    except sdk.APIStatusError as exc:
        status = exc.status_code
        detail = f"HTTP {status}: {quoted(scrub(_upstream_message(exc), secrets))}"
        if status in TRANSIENT_STATUS or status >= 500:
            raise Transient(detail, _retry_after(exc.response)) from None
        if status in (401, 403):
            raise ModelUnavailable(
                f"the model provider {provider!r} refused its credentials: {detail}",
                hint="the operator sets the key in the environment variable named by api_key_env in the models file",
            ) from None
        raise ModelRequestRejected(
            f"the model provider {provider!r} refused the request: {detail}",
            hint="check the agent's model name and settings; the provider's message says what it refused",
        ) from None
    except sdk.APITimeoutError:
        raise Transient("the request timed out") from None
    except sdk.APIConnectionError as exc:
        raise Transient(f"could not connect: {quoted(scrub(str(exc.__cause__ or exc), secrets))}") from None
    latency_ms = int((time.monotonic() - started) * 1000)
    try:
        body = raw.http_response.json()
    except ValueError:
        raise ModelResponseInvalid(
            f"the model provider {provider!r} answered with a body that is not JSON: "
            f"{quoted(scrub(raw.http_response.text, secrets))}",
            hint="check the provider's base_url in the models file: it must be the API's root",
        ) from None
    return body, latency_ms


def _upstream_message(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type")
            return f"{kind}: {error['message']}" if isinstance(kind, str) else error["message"]
        if isinstance(error, str):
            return error
    try:
        return exc.response.text or exc.message
    except Exception:  # a streamed or closed response: the SDK's own message then
        return exc.message


def _retry_after(response: Any) -> float | None:
    try:
        return float(response.headers.get("retry-after"))
    except (TypeError, ValueError, AttributeError):
        return None
