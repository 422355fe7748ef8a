"""The `ledger` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import uuid
from pathlib import Path

from .config import Settings
from .errors import LedgerError

log = logging.getLogger("ledger")


# ---------------------------------------------------------------------------- the database to use


class Attached:
    """A database conninfo, plus the embedded cluster behind it when we are using one."""

    def __init__(self, conninfo: str, cluster=None) -> None:
        self.conninfo = conninfo
        self.cluster = cluster

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


EMBEDDED_DATABASE = "ledger"


def attach(settings: Settings, *, migrate: bool = True) -> Attached:
    """Use LEDGER_DATABASE_URL, or start (or join) the embedded cluster of the data dir."""
    from .db.migrate import apply_migrations

    if settings.database_url:
        attached = Attached(settings.database_url)
    else:
        from .db.cluster import EmbeddedCluster

        cluster = EmbeddedCluster(settings.data_dir / "pg")
        created = cluster.ensure_initialized()
        if created:
            print(f"initialized an embedded PostgreSQL cluster in {cluster.data}", file=sys.stderr)
        cluster.start()
        ensure_database(cluster.url(), EMBEDDED_DATABASE)
        # Closing stops the server if we started it (once other commands using it are done), and in
        # any case tells the starter that this command is done with it.
        attached = Attached(cluster.url(EMBEDDED_DATABASE), cluster)
    if migrate:
        applied = apply_migrations(attached.conninfo)
        for name in applied:
            print(f"applied migration {name}", file=sys.stderr)
    return attached


def ensure_database(admin_conninfo: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # a concurrent command created it first (PostgreSQL reports either)


# ---------------------------------------------------------------------------- admin identity on disk


def _admin_file(settings: Settings) -> Path:
    return settings.data_dir / "admin.json"


def write_admin(settings: Settings, tenant_id: uuid.UUID, client_id: uuid.UUID, token: str) -> Path:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    token_path = settings.data_dir / "admin-token"
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(token_path, 0o600)
    _admin_file(settings).write_text(json.dumps({"tenant": str(tenant_id), "client": str(client_id)}))
    return token_path


def read_admin(settings: Settings) -> dict | None:
    try:
        return json.loads(_admin_file(settings).read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- commands


def cmd_schema(args: argparse.Namespace, settings: Settings) -> int:
    from .api.sdl import schema_sdl

    sys.stdout.write(schema_sdl())
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    attached = attach(settings)
    try:
        print("migrations are up to date")
    finally:
        attached.close()
    return 0


def cmd_tenant_create(args: argparse.Namespace, settings: Settings) -> int:
    from .auth.clients import create_tenant
    from .auth.tokens import TokenService, load_signing_key

    attached = attach(settings)
    try:
        tenant_id, admin_id = create_tenant(attached.conninfo, args.name)
        token, _ = TokenService(load_signing_key(attached.conninfo)).mint(tenant_id, admin_id, args.ttl)
    finally:
        attached.close()
    print(f"tenant {args.name!r}: {tenant_id}")
    print(f"admin client: {admin_id}")
    print(token)
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from .auth.tokens import TokenService, load_signing_key

    admin = read_admin(settings) or {}
    tenant = args.tenant or admin.get("tenant")
    client = args.client or admin.get("client")
    if not tenant or not client:
        raise LedgerError("no client to mint a token for", code="bad_request",
                          hint="pass --tenant and --client (the embedded default's admin is used when both are omitted)")
    try:
        tenant_id, client_id = uuid.UUID(tenant), uuid.UUID(client)
    except ValueError:
        raise LedgerError(f"--tenant {tenant!r} and --client {client!r} must be UUIDs", code="bad_request",
                          hint="`ledger tenant create` prints a tenant's id and its admin client's id") from None
    if args.ttl is not None and args.ttl <= 0:
        raise LedgerError("--ttl must be a positive number of seconds", code="bad_request",
                          hint="omit it for a token without expiry")
    attached = attach(settings)
    try:
        with psycopg.connect(attached.conninfo, autocommit=True) as conn:
            conn.execute("SET ROLE ledger_app")
            with conn.transaction():
                conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(tenant_id),))
                row = conn.execute("SELECT enabled FROM clients WHERE tenant_id = %s AND id = %s",
                                   (tenant_id, client_id)).fetchone()
        if row is None:
            raise LedgerError(f"no client {client_id} in tenant {tenant_id}", code="not_found",
                              hint="check the ids; `ledger tenant create` prints a new tenant's admin client")
        if not row[0]:
            raise LedgerError(f"client {client_id} is disabled", code="client_disabled")
        token, _ = TokenService(load_signing_key(attached.conninfo)).mint(tenant_id, client_id, args.ttl)
    finally:
        attached.close()
    print(token)
    return 0


def _exit_quietly(signum, frame) -> None:
    raise SystemExit(0)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from .auth.clients import create_tenant
    from .auth.tokens import TokenService, load_signing_key

    from .api import graphiql
    from .logs import logging_config
    from .models import load_models

    # Before anything starts: an invalid models file is an error naming the file and key, not a
    # traceback from the server's factory; so is an HTTP stack that is not there.
    load_models(settings.models_file)
    http = _http_stack()
    attached = attach(settings)
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again: handle it, so that the
    # `finally` below still runs (closing the services and the embedded cluster) instead of the
    # default action ending the process first.
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        # Worker processes (uvicorn --workers) attach through the URL; the cluster stays ours.
        os.environ["LEDGER_DATABASE_URL"] = attached.conninfo
        os.environ["LEDGER_DATA_DIR"] = str(settings.data_dir.resolve())
        os.environ["LEDGER_RUN_WORKER"] = "0" if args.no_worker else "1"
        # The app reads its settings again (uvicorn's factory): the MCP endpoint's allowed hosts default
        # to the host and port served.
        os.environ["LEDGER_HOST"], os.environ["LEDGER_PORT"] = settings.host, str(settings.port)
        if settings.models_file is not None:
            os.environ["LEDGER_MODELS"] = str(settings.models_file.resolve())
        metrics_dir = _multiprocess_metrics(args.workers)
        graphiql.ensure_assets(settings)  # in the background, when no cache holds them
        if settings.embedded:
            admin = read_admin(settings)
            token_path = settings.data_dir / "admin-token"
            if admin is None or not token_path.exists():
                tenant_id, admin_id = create_tenant(attached.conninfo, "default")
                token, _ = TokenService(load_signing_key(attached.conninfo)).mint(tenant_id, admin_id, None)
                token_path = write_admin(settings, tenant_id, admin_id, token)
                print(f"created tenant 'default' ({tenant_id}) with an admin client ({admin_id})")
                print(f"admin token (also in {token_path}):\n{token}")
            token = token_path.read_text().strip()
            if _loopback(settings.host):
                print(f"GraphiQL: http://{settings.host}:{settings.port}/graphql#token={token}", flush=True)
            else:  # a URL carrying the admin token is printed for loopback only
                print(f"GraphiQL: http://{settings.host}:{settings.port}/graphql (add #token=<the admin token in "
                      f"{token_path}> to the URL)", flush=True)
        else:
            print(f"GraphQL: http://{settings.host}:{settings.port}/graphql", flush=True)
        if http == "granian":
            _serve_granian(args, settings)
        else:
            protocol = {"h11": "NoDelayH11Protocol", "httptools": "NoDelayHttpToolsProtocol"}[http]
            uvicorn.run("ledger.wiring:create_app", factory=True, host=settings.host, port=settings.port,
                        workers=args.workers if args.workers > 1 else None, log_level=args.log_level,
                        access_log=False, timeout_graceful_shutdown=10, log_config=logging_config(args.log_level),
                        http=f"ledger.api.nodelay:{protocol}")
    finally:
        attached.close()
        if metrics_dir is not None:
            import shutil

            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


# The HTTP/1.1 server under the app (README "Serving"): uvicorn with httptools' parser (llhttp, in C), the
# default; uvicorn with h11 (pure Python: ~0.4 ms more server CPU per read); granian (Rust; not a
# dependency: `pip install granian`). `python -m bench.http_stacks` measures the three in one run.
HTTP_STACKS = ("httptools", "h11", "granian")


def _http_stack() -> str:
    import importlib.util

    http = os.environ.get("LEDGER_HTTP", "").strip().lower() or "httptools"
    if http not in HTTP_STACKS:
        raise LedgerError(f"LEDGER_HTTP={http!r} names no HTTP stack", code="bad_request",
                          hint=f"use one of {', '.join(HTTP_STACKS)}, or leave it unset (httptools)")
    if importlib.util.find_spec(http) is None:  # each stack's package has its name
        raise LedgerError(f"LEDGER_HTTP={http} needs the {http} package, which is not installed",
                          code="bad_request", hint=f"pip install {http}, or leave LEDGER_HTTP unset")
    return http


def _serve_granian(args: argparse.Namespace, settings: Settings) -> None:
    from granian.constants import Interfaces, Loops
    from granian.log import LogLevels
    from granian.server import Server

    from .logs import logging_config

    Server("ledger.wiring:create_app", factory=True, address=settings.host, port=settings.port,
           interface=Interfaces.ASGI, workers=max(args.workers, 1), loop=Loops.uvloop,
           log_level=LogLevels(args.log_level.lower()), log_dictconfig=logging_config(args.log_level),
           workers_kill_timeout=10).serve()


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _multiprocess_metrics(workers: int) -> str | None:
    """With several server processes, a scrape must see them all: prometheus-client's multiprocess mode,
    whose directory must be set before the processes start (and empty)."""
    if workers <= 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    import tempfile

    path = tempfile.mkdtemp(prefix="ledger-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def cmd_assets_fetch(args: argparse.Namespace, settings: Settings) -> int:
    from .api import graphiql

    dest = Path(args.dest) if args.dest else settings.data_dir / "graphiql"
    try:
        graphiql.fetch_assets(dest, timeout=args.timeout)
    except (graphiql.FetchFailed, OSError) as exc:
        print(f"error: could not fetch the GraphiQL assets into {dest}: {exc}", file=sys.stderr)
        print("hint: GraphiQL then loads them from the public CDN, which needs internet; the assets come from "
              "the npm registry (via `npm`)", file=sys.stderr)
        return 1
    print(f"GraphiQL assets are in {dest}")
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import threading

    from .models import load_models
    from .queue.worker import Worker
    from .wiring import freeze_startup_heap, open_services

    models = load_models(settings.models_file)  # an invalid file stops the worker before it attaches
    attached = attach(settings)
    services = open_services(settings, attached.conninfo, models)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker = Worker(services, concurrency=args.concurrency or settings.worker_concurrency,
                    lease_seconds=settings.lease_seconds).start()
    freeze_startup_heap()
    print(f"worker {worker.name} running", flush=True)
    sampler = _serve_worker_metrics(args.metrics_port, settings, services) if args.metrics_port else None
    try:
        while not stop.wait(1.0):
            pass
    finally:
        # Graceful: claim nothing more, finish the attempts held.
        worker.stop()
        if sampler is not None:
            sampler.stop()
        services.close()
        attached.close()
    return 0


def _serve_worker_metrics(port: int, settings: Settings, services):
    """Prometheus metrics of a `ledger worker` process (its attempts, queue and pools) on host:port."""
    from .metrics import PoolSampler, serve_metrics

    serve_metrics(settings.host, port, settings.metrics_token)
    print(f"metrics: http://{settings.host}:{port}/metrics", flush=True)
    return PoolSampler(services).start()


# ---------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="PostgreSQL conninfo/URL (env LEDGER_DATABASE_URL); "
                        "default: the embedded cluster of the data dir")
    common.add_argument("--data-dir", help="where the embedded cluster and admin token live "
                        "(env LEDGER_DATA_DIR, default ./.ledger)")

    parser = argparse.ArgumentParser(prog="ledger", description="A transactional action ledger with a GraphQL API.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the GraphQL server")
    serve.add_argument("--host", help="listen address (env LEDGER_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (env LEDGER_PORT, default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    serve.add_argument("--no-worker", action="store_true", help="do not run an in-process queue worker")
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--models", help=MODELS_HELP)
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", parents=[common], help="run a queue worker (scale-out)")
    worker.add_argument("--concurrency", type=int, help="attempts at once (env LEDGER_WORKER_CONCURRENCY, default 4)")
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus metrics at /metrics on this port "
                        "(of --host, default 127.0.0.1); none by default")
    worker.add_argument("--host", help="the address --metrics-port listens on (env LEDGER_HOST, default 127.0.0.1)")
    worker.add_argument("--models", help=MODELS_HELP)
    worker.set_defaults(func=cmd_worker)

    migrate = sub.add_parser("migrate", parents=[common], help="apply pending migrations")
    migrate.set_defaults(func=cmd_migrate)

    token = sub.add_parser("token", parents=[common], help="mint a bearer token for a client")
    token.add_argument("--client", help="client id (default: the embedded admin)")
    token.add_argument("--tenant", help="tenant id (default: the embedded admin's tenant)")
    token.add_argument("--ttl", type=int, help="lifetime in seconds (default: no expiry)")
    token.set_defaults(func=cmd_token)

    tenant = sub.add_parser("tenant", help="tenant administration")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True)
    tenant_create = tenant_sub.add_parser("create", parents=[common], help="create a tenant and print its admin token")
    tenant_create.add_argument("name")
    tenant_create.add_argument("--ttl", type=int, help="admin token lifetime in seconds (default: no expiry)")
    tenant_create.set_defaults(func=cmd_tenant_create)

    schema = sub.add_parser("schema", help="print the GraphQL SDL")
    schema.set_defaults(func=cmd_schema)

    assets = sub.add_parser("assets", help="GraphiQL's static assets")
    assets_sub = assets.add_subparsers(dest="assets_command", required=True)
    assets_fetch = assets_sub.add_parser("fetch", parents=[common], help="fetch the pinned GraphiQL assets from the "
                                         "npm registry into a cache the server serves them from")
    assets_fetch.add_argument("--dest", help="the cache directory (default: <data dir>/graphiql)")
    assets_fetch.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    assets_fetch.set_defaults(func=cmd_assets_fetch)

    from .client import command as publish_command  # stdlib only: cheap to import

    publish = sub.add_parser("publish", help="create/update and publish tool definitions (TOML) through the API")
    publish_command.configure_parser(publish)
    publish.set_defaults(func=lambda args, settings: publish_command.run(args))
    return parser


MODELS_HELP = "the model providers' TOML file (env LEDGER_MODELS; README \"Agents\"); none by default"


def settings_from(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if getattr(args, "database_url", None):
        settings.database_url = args.database_url
    if getattr(args, "data_dir", None):
        settings.data_dir = Path(args.data_dir)
    if getattr(args, "host", None):
        settings.host = args.host
    if getattr(args, "port", None):
        settings.port = args.port
    if getattr(args, "models", None):
        settings.models_file = Path(args.models)
    return settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .logs import configure

    # JSON lines for the long-running processes an operator collects logs from; text for the rest.
    configure(json_default=args.command in ("serve", "worker"))
    try:
        return args.func(args, settings_from(args))
    except LedgerError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
