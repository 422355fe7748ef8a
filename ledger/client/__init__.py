"""A small typed client of the ledger's GraphQL API, for scripts, CI and tests (standard library only).

    from ledger.client import LedgerClient

    client = LedgerClient("http://127.0.0.1:8000/graphql", token)   # or LedgerClient() from LEDGER_URL/LEDGER_TOKEN
    execution = client.invoke(action_id, {"account_id": "..."})    # runs in its own request; FAILED is not an error
    if execution.failed:
        print(execution.error.code, execution.error.message, execution.error.hint)
    started = client.start(action_id, {...})
    done = client.wait(started.execution_id, timeout=60)

A request that fails with a GraphQL error raises `LedgerRequestError` (code, message, hint, problems). A request
the server answers `retryable` (a lost race, a passed deadline: it was rolled back) is sent again, with
exponential backoff, a bounded number of times. `invoke` and `start` send an `executionId` (a new one
unless given), so repeating them can never run an action twice: they are retried also when the
connection fails mid-request.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .errors import LedgerRequestError, WaitTimeout
from .publish import PublishResult, publish

DEFAULT_URL = "http://127.0.0.1:8000/graphql"
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

# (method, url, body, headers, timeout) -> (HTTP status, response body). Raises OSError when the
# request could not be exchanged (urllib.error.URLError is one).
Transport = Callable[[str, str, bytes, dict, float], "tuple[int, bytes]"]


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ExecutionError:
    code: str
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Execution:
    """An execution as the server answered it (`raw` has every field read)."""

    execution_id: str
    action_id: str
    action_version: int
    status: str
    attempts: int
    input: Any = None
    output: Any = None
    error: ExecutionError | None = None
    logs: tuple[str, ...] = ()
    children: tuple["Execution", ...] = ()
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"

    @property
    def failed(self) -> bool:
        return self.status == "FAILED"

    def check(self) -> "Execution":
        """This execution if it succeeded (or is not final yet); else a LedgerRequestError with its error."""
        if self.status in ("FAILED", "CANCELLED"):
            error = self.error or ExecutionError(self.status.lower(), f"the execution is {self.status}")
            raise LedgerRequestError(error.message, code=error.code, hint=error.hint)
        return self

    @classmethod
    def from_json(cls, raw: dict) -> "Execution":
        invocation = raw.get("invocation") or {}
        error = invocation.get("error")
        return cls(
            execution_id=raw["executionId"], action_id=raw.get("actionId"), action_version=raw.get("actionVersion"),
            status=raw["status"], attempts=raw.get("attempts", 0), input=invocation.get("input"),
            output=invocation.get("output"),
            error=ExecutionError(error["code"], error["message"], error.get("hint")) if error else None,
            logs=tuple(invocation.get("logs") or ()),
            children=tuple(cls.from_json(child) for child in raw.get("children") or ()),
            raw=raw,
        )


EXECUTION_FIELDS = """executionId actionId actionVersion status attempts rootExecutionId parentExecutionId
  invocation { input output error { code message hint } logs attempt startedAt finishedAt }
  children { executionId actionId actionVersion status attempts
             invocation { input output error { code message hint } logs } }"""

INVOKE = f"""mutation Invoke($id: UUID!, $input: InvokeActionInput!) {{
  actions {{ invokeAction(id: $id, input: $input) {{ {EXECUTION_FIELDS} }} }} }}"""
START = f"""mutation Start($id: UUID!, $input: StartActionInput!) {{
  actions {{ startAction(id: $id, input: $input) {{ {EXECUTION_FIELDS} }} }} }}"""
READ_EXECUTION = f"""query Execution($id: UUID!) {{ actions {{ execution(id: $id) {{ {EXECUTION_FIELDS} }} }} }}"""


# ---------------------------------------------------------------------------- the client


def urllib_transport(method: str, url: str, body: bytes, headers: dict, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:  # 4xx/5xx: the GraphQL error is in the body
        with exc:
            return exc.code, exc.read()


def _refused(exc: BaseException) -> bool:
    """True when the connection was refused: the request was certainly not received."""
    reason = getattr(exc, "reason", exc)
    return isinstance(reason, ConnectionRefusedError) or isinstance(exc, ConnectionRefusedError)


class LedgerClient:
    """One ledger endpoint and one bearer token.

    `retries` bounds how many times a request is sent again after a `retryable` answer (or a refused
    connection); the wait before retry n is `backoff * 2**(n-1)` seconds, capped at `max_backoff`, with
    jitter. `request_timeout` sends `Request-Timeout` (the server's deadline for the transaction).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0,
                 retries: int = 4, backoff: float = 0.1, max_backoff: float = 5.0,
                 request_timeout: float | None = None, transport: Transport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = url or os.environ.get("LEDGER_URL") or DEFAULT_URL
        self.token = token if token is not None else os.environ.get("LEDGER_TOKEN")
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.transport = transport or urllib_transport
        self._sleep = sleep

    # ------------------------------------------------------------------ requests

    def query(self, document: str, variables: dict | None = None, *, operation_name: str | None = None,
              dry_run: bool = False, idempotent: bool = False) -> dict:
        """The `data` of a request; raises LedgerRequestError when the response carries errors.

        `dry_run` sends `Ledger-Dry-Run: true`: the server runs the request and rolls it back.
        `idempotent` says the request may safely be sent again after a failed exchange (not only
        after a `retryable` answer, which is always safe: the server rolled it back).
        """
        return self.response(document, variables, operation_name=operation_name, dry_run=dry_run,
                             idempotent=idempotent)["data"]

    def response(self, document: str, variables: dict | None = None, *, operation_name: str | None = None,
                 dry_run: bool = False, idempotent: bool = False) -> dict:
        """`{"data", "extensions"}` of a request (extensions: e.g. the `warnings` of a written action),
        as `query` sends it and raises."""
        attempt = 0
        while True:
            try:
                return self._once(document, variables, operation_name, dry_run)
            except LedgerRequestError as exc:
                if attempt >= self.retries or not (exc.retryable or (idempotent and exc.code == "transport_error")):
                    raise
            attempt += 1
            delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
            self._sleep(delay * random.uniform(0.5, 1.0))

    def _once(self, document: str, variables: dict | None, operation_name: str | None, dry_run: bool) -> dict:
        if not self.token:
            raise LedgerRequestError("no token to send", code="unauthenticated",
                              hint="set LEDGER_TOKEN (or pass a token); `ledger token` mints one")
        payload: dict[str, Any] = {"query": document, "variables": variables or {}}
        if operation_name:
            payload["operationName"] = operation_name
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "Authorization": f"Bearer {self.token}"}
        if dry_run:
            headers["Ledger-Dry-Run"] = "true"
        if self.request_timeout is not None:
            headers["Request-Timeout"] = f"{self.request_timeout:g}"
        try:
            status, body = self.transport("POST", self.url, json.dumps(payload).encode(), headers, self.timeout)
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise LedgerRequestError(f"cannot reach the ledger at {self.url}: {reason}", code="transport_error",
                              hint="check the URL (LEDGER_URL) and that `ledger serve` is running",
                              retryable=_refused(exc)) from exc
        try:
            response = json.loads(body)
        except ValueError:
            response = None
        if not isinstance(response, dict) or ("data" not in response and "errors" not in response):
            snippet = body[:200].decode(errors="replace")
            raise LedgerRequestError(f"the server answered HTTP {status} without a GraphQL response: {snippet}",
                              code="http_error", status=status, retryable=status == 503,
                              hint="check that the URL names the ledger's /graphql endpoint")
        if response.get("errors"):
            raise LedgerRequestError.from_graphql(response["errors"], status)
        return {"data": response.get("data") or {}, "extensions": response.get("extensions") or {}}

    # ------------------------------------------------------------------ executions

    def invoke(self, action_id: str | uuid.UUID, input: Any = None, execution_id: str | uuid.UUID | None = None,
               version: int | None = None) -> Execution:
        """Run an action in a request of its own (synchronous). A FAILED execution is returned, not raised."""
        payload = self._execution_input(input, execution_id, version)
        data = self.query(INVOKE, {"id": str(action_id), "input": payload}, idempotent=True)
        return Execution.from_json(data["actions"]["invokeAction"])

    def start(self, action_id: str | uuid.UUID, input: Any = None, execution_id: str | uuid.UUID | None = None,
              version: int | None = None, run_at: str | None = None) -> Execution:
        """Queue an action for a worker; returns the QUEUED execution (see `wait`)."""
        payload = self._execution_input(input, execution_id, version)
        if run_at is not None:
            payload["runAt"] = run_at
        data = self.query(START, {"id": str(action_id), "input": payload}, idempotent=True)
        return Execution.from_json(data["actions"]["startAction"])

    def execution(self, execution_id: str | uuid.UUID) -> Execution | None:
        data = self.query(READ_EXECUTION, {"id": str(execution_id)}, idempotent=True)
        raw = data["actions"]["execution"]
        return Execution.from_json(raw) if raw else None

    def wait(self, execution_id: str | uuid.UUID, timeout: float = 60.0, *, poll: float = 0.05,
             max_poll: float = 1.0) -> Execution:
        """Poll `execution(id)` until it is SUCCEEDED, FAILED or CANCELLED; WaitTimeout after `timeout` s."""
        deadline = time.monotonic() + timeout
        last: Execution | None = None
        while True:
            last = self.execution(execution_id)
            if last is None:
                raise LedgerRequestError(f"no execution {execution_id}", code="not_found",
                                  hint="check the id (an execution started in a request that rolled back does not exist)")
            if last.final:
                return last
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"execution {execution_id} is still {last.status} after {timeout:g} s",
                                  code="timeout", hint="wait longer, or cancel it with cancelExecution")
            self._sleep(min(poll, remaining))
            poll = min(max_poll, poll * 2)

    @staticmethod
    def _execution_input(input: Any, execution_id: str | uuid.UUID | None, version: int | None) -> dict:
        payload: dict[str, Any] = {"executionId": str(execution_id or uuid.uuid4()),
                                   "input": {} if input is None else input}
        if version is not None:
            payload["actionVersion"] = version
        return payload

    # ------------------------------------------------------------------ publishing

    def publish(self, paths: Iterable[str | os.PathLike], dry_run: bool = False) -> PublishResult:
        """Create or update and publish the tool definitions of `paths` (see ledger.client.publish).

        Returns a PublishResult; raises ledger.client.publish.DefinitionError for unreadable definitions and
        ledger.client.publish.PublishRejected (a LedgerRequestError) when the server rejects them.
        """
        return publish(self, paths, dry_run=dry_run)
