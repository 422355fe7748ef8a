"""Configuration from options and the environment, in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _env_int_or_none(name: str) -> int | None:
    raw = os.environ.get(name)
    return int(raw) if raw else None


@dataclass
class Settings:
    database_url: str | None = field(default_factory=lambda: os.environ.get("LEDGER_DATABASE_URL") or None)
    data_dir: Path = field(default_factory=lambda: Path(os.environ.get("LEDGER_DATA_DIR", ".ledger")))
    host: str = field(default_factory=lambda: os.environ.get("LEDGER_HOST", "127.0.0.1"))
    port: int = field(default_factory=lambda: _env_int("LEDGER_PORT", 8000))
    # Requests: default deadline (Request-Timeout may lower or raise it up to the maximum). A little
    # above the default responseTimeout (30 s), so that a tool at its defaults that never finishes is
    # recorded as a FAILED `action_response_timeout` instead of failing the whole request as retryable.
    request_timeout: float = field(default_factory=lambda: _env_float("LEDGER_REQUEST_TIMEOUT", 35.0))
    max_request_timeout: float = 300.0
    max_body_bytes: int = field(default_factory=lambda: _env_int("LEDGER_MAX_BODY_BYTES", 8 << 20))
    # How many times the server retries a request that lost a race before answering `retryable`.
    # Measured: 8 threads moving money between two accounts saw ~30% `retryable` answers with 3 retries
    # and none with 10; every retry is bounded by the request's deadline and a capped, jittered backoff.
    race_retries: int = field(default_factory=lambda: _env_int("LEDGER_RACE_RETRIES", 8))
    pool_min: int = field(default_factory=lambda: _env_int("LEDGER_POOL_MIN", 2))
    pool_max: int = field(default_factory=lambda: _env_int("LEDGER_POOL_MAX", 20))
    pool_wait: float = field(default_factory=lambda: _env_float("LEDGER_POOL_WAIT", 10.0))
    # Requests that may wait for a connection at once; beyond them a request fails at once (`retryable`).
    pool_queue: int = field(default_factory=lambda: _env_int("LEDGER_POOL_QUEUE", 20))
    # Sandbox executors: `executors` kept warm, up to `executors_max` (default 4x, at least 8).
    executors: int = field(default_factory=lambda: _env_int("LEDGER_EXECUTORS", 2))
    executors_max: int | None = field(default_factory=lambda: _env_int_or_none("LEDGER_EXECUTORS_MAX"))
    # The most executors one tenant's calls hold at once (default half of executors_max), so that one
    # tenant's slow calls leave executors for the others' (DESIGN 17). Set it to executors_max for a
    # single-tenant deployment.
    executors_per_tenant: int | None = field(default_factory=lambda: _env_int_or_none("LEDGER_EXECUTORS_PER_TENANT"))
    executor_memory_bytes: int = field(default_factory=lambda: _env_int("LEDGER_EXECUTOR_MEMORY", 1 << 30))
    max_payload_bytes: int = field(default_factory=lambda: _env_int("LEDGER_MAX_PAYLOAD", 16 << 20))

    # /metrics: per-action series carry tenants' action names, so they are the operator's choice; with a
    # token set, a scrape must send `Authorization: Bearer <token>`.
    metrics_per_action: bool = field(default_factory=lambda: os.environ.get("LEDGER_METRICS_PER_ACTION") == "1")
    metrics_token: str | None = field(default_factory=lambda: os.environ.get("LEDGER_METRICS_TOKEN") or None)

    # Called agents (DESIGN 13) that may hold a request's transaction at once, per tenant, across every
    # process on the database; more fail at once with `retryable`.
    agent_calls_per_tenant: int = field(default_factory=lambda: _env_int("LEDGER_AGENT_CALLS_PER_TENANT", 2))

    # Queue workers: attempts run at once per worker process.
    worker_concurrency: int = field(default_factory=lambda: _env_int("LEDGER_WORKER_CONCURRENCY", 4))
    # How long a claim holds without a heartbeat: a dead worker's work is retried after this.
    lease_seconds: float = field(default_factory=lambda: _env_float("LEDGER_LEASE_SECONDS", 10.0))

    # The Host values the MCP endpoint answers (DNS-rebinding protection, DESIGN 12): comma-separated,
    # `name:*` for any port, `*` for no check (behind a proxy that checks). Default: the host served.
    mcp_allowed_hosts: str | None = field(default_factory=lambda: os.environ.get("LEDGER_MCP_ALLOWED_HOSTS"))

    # The model providers (DESIGN 13): a TOML file, read once per process; none configured without it.
    models_file: Path | None = field(default_factory=lambda: Path(os.environ["LEDGER_MODELS"])
                                     if os.environ.get("LEDGER_MODELS") else None)

    def mcp_hosts(self) -> list[str]:
        if self.mcp_allowed_hosts and self.mcp_allowed_hosts.strip():
            return [h.strip() for h in self.mcp_allowed_hosts.split(",") if h.strip()]
        hosts = [f"{self.host}:{self.port}"]
        if self.host in ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "::"):
            # A loopback (or every-interface) server is reached as any of its local names.
            hosts += [f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"]
        return list(dict.fromkeys(hosts))

    @property
    def embedded(self) -> bool:
        return self.database_url is None
