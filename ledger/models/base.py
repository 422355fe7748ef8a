"""What every HTTP provider adapter shares: one `complete` with the runtime's retries around one attempt."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from .failures import ModelResponseInvalid, quoted, scrub, with_retries
from .types import ModelRequest, ModelResponse

# Sent when a provider has no api_key_env (a local server, a proxy that adds its own): the SDKs need one.
NO_KEY = "unused"


_PARAMETERS: dict[Any, frozenset[str]] = {}


def _parameters(create: Callable) -> frozenset[str]:
    key = getattr(create, "__func__", create)
    if key not in _PARAMETERS:
        import inspect

        _PARAMETERS[key] = frozenset(inspect.signature(create).parameters)
    return _PARAMETERS[key]


class HTTPProvider:
    type: str
    default_base_url: str

    def __init__(self, name: str, *, base_url: str | None = None, api_key: str | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.base_url = base_url or self.default_base_url
        self._api_key = api_key or NO_KEY
        self._secrets = (api_key,) if api_key else ()
        self._sleep, self._clock = sleep, clock
        self._client: Any = None
        self._client_lock = threading.Lock()

    def client(self) -> Any:
        # The SDKs take a second or more to import: only a process that calls a model pays for it.
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = self._new_client(self._api_key)
        return self._client

    def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.wire_request(request)
        client = self.client()

        def attempt(remaining: float | None):
            timeout = request.timeout if remaining is None else max(0.001, min(request.timeout, remaining))
            return self._send(client, body, timeout)

        (answer, latency_ms), attempts = with_retries(attempt, provider=self.name, deadline=request.deadline,
                                                      sleep=self._sleep, clock=self._clock)
        try:
            return self.parse_response(request, answer, latency_ms, attempts)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise ModelResponseInvalid(
                f"the model provider {self.name!r} answered in a shape its wire format does not document "
                f"({type(exc).__name__}: {exc}): {quoted(scrub(json.dumps(answer)[:2000], self._secrets))}",
                hint="check that the provider's type and base_url in the models file match the server it reaches",
            ) from None

    @staticmethod
    def sdk_arguments(create: Callable, body: dict) -> dict:
        """`body` as keyword arguments of the SDK's `create`: a field that this SDK version no longer (or
        not yet) names goes in `extra_body`, so the wire body is the same whatever the SDK's version."""
        names = _parameters(create)
        known = {k: v for k, v in body.items() if k in names}
        extra = {k: v for k, v in body.items() if k not in names}
        return {**known, "extra_body": extra} if extra else known

    # Each adapter: its SDK client, its request body, one attempt, its response.
    def _new_client(self, api_key: str) -> Any: ...

    def wire_request(self, request: ModelRequest) -> dict: ...

    def _send(self, client: Any, body: dict, timeout: float) -> tuple[dict, int]: ...

    def parse_response(self, request: ModelRequest, answer: dict, latency_ms: int, attempts: int) -> ModelResponse: ...
