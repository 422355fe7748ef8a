"""Test fixtures: one throwaway PostgreSQL cluster per session, a fresh database per test.

Set LEDGER_TEST_DATABASE_URL to a superuser conninfo of an existing server to use it instead.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import settings as hypothesis_settings
from psycopg import sql

from ledger.auth.clients import create_tenant
from ledger.config import Settings
from ledger.db.cluster import EmbeddedCluster
from ledger.db.migrate import apply_migrations
from ledger.wiring import open_services

TEMPLATE = "ledger_test_template"

# CI replays a fixed sequence of generated examples (a red build means a change broke something);
# developers' runs stay random, to find new bugs.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")
_counter = itertools.count()


def _with_dbname(conninfo: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(conninfo, dbname=dbname)


@pytest.fixture(scope="session")
def pg_admin_url():
    external = os.environ.get("LEDGER_TEST_DATABASE_URL")
    if external:
        yield external
        return
    root = Path(tempfile.mkdtemp(prefix="ledger-test-pg-"))
    os.chmod(root, 0o755)
    cluster = EmbeddedCluster(root, durable=False)
    cluster.start()
    try:
        yield cluster.url()
    finally:
        cluster.stop("immediate")


@pytest.fixture(scope="session")
def template_url(pg_admin_url):
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    url = _with_dbname(pg_admin_url, TEMPLATE)
    apply_migrations(url)
    return url


@pytest.fixture
def db_url(pg_admin_url, template_url):
    name = f"ledger_test_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE)))
    yield _with_dbname(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10)


@pytest.fixture
def services(settings, db_url):
    svc = open_services(settings, db_url)
    yield svc
    svc.close()


@pytest.fixture
def worker(services):
    """A queue worker in this process, polling often and leasing briefly, so that a test sees runs finish."""
    from ledger.queue.worker import Worker

    running = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.1).start()
    yield running
    running.stop()


@pytest.fixture
def model_server():
    """A local HTTP server speaking the openai and anthropic wire formats (tests/model_server.py)."""
    from model_server import ModelServer

    with ModelServer() as server:
        yield server


@dataclass
class Api:
    """A client of one tenant, speaking GraphQL over the ASGI app."""

    http: Any
    token: str
    tenant_id: uuid.UUID
    client_id: uuid.UUID

    def post(self, query: str, variables: dict | None = None, *, headers: dict | None = None,
             token: str | None = None) -> Any:
        hdrs = {"Authorization": f"Bearer {token or self.token}"}
        hdrs.update(headers or {})
        return self.http.post("/graphql", json={"query": query, "variables": variables or {}}, headers=hdrs)

    def gql(self, query: str, variables: dict | None = None, **kw) -> dict:
        """The response body; asserts it carries no errors."""
        response = self.post(query, variables, **kw)
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    def error(self, query: str, variables: dict | None = None, **kw) -> dict:
        """The first error of a request that must fail."""
        body = self.post(query, variables, **kw).json()
        assert body.get("errors"), body
        return body["errors"][0]

    def as_client(self, token: str) -> "Api":
        return Api(self.http, token, self.tenant_id, self.client_id)


@pytest.fixture
def http(services):
    from starlette.testclient import TestClient

    from ledger.api.http import build_app

    with TestClient(build_app(services)) as client:
        yield client


def new_tenant(http, services, db_url, name: str = "acme") -> Api:
    tenant_id, admin_id = create_tenant(db_url, name)
    token, _ = services.tokens.mint(tenant_id, admin_id)
    return Api(http, token, tenant_id, admin_id)


@pytest.fixture
def api(http, services, db_url) -> Api:
    return new_tenant(http, services, db_url)


@pytest.fixture
def other_api(http, services, db_url) -> Api:
    return new_tenant(http, services, db_url, "globex")


@pytest.fixture(scope="module")
def deployment():
    """The deployment shape of the reliability tests: an external cluster, `ledger serve --no-worker
    --workers 2` and two `ledger worker` processes (tests/reliability/deployment.py)."""
    from ledger.db.cluster import PostgresNotFound, find_pg_bin
    from reliability.deployment import Deployment

    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc.message}")
    deployed = Deployment(servers=2, workers=2)
    try:
        yield deployed
    finally:
        deployed.close()
