"""The pool's connections: a connection returned moments ago goes to the next request without the
pool's check (ledger/db/pool.py TRUSTED_FOR), and one that broke meanwhile is replaced unseen."""

from __future__ import annotations

import uuid

import psycopg

from helpers import ACCOUNT, CREATE_TRANSFER, balance, funded_account


def _close_the_ledgers_connections(db_url: str) -> int:
    """What an idle timeout, a failover or an administrator does to the idle connections in the pool."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                            " AND state = 'idle') AS closed").fetchone()[0]


def test_a_read_right_after_the_server_closed_the_pooled_connections_succeeds(api, db_url):
    _, funded = funded_account(api, 10)
    assert balance(api, funded) == 10
    assert _close_the_ledgers_connections(db_url) >= 1
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 10


def test_a_transfer_right_after_the_server_closed_the_pooled_connections_happens_once(api, db_url):
    opening, funded = funded_account(api, 10)
    assert _close_the_ledgers_connections(db_url) >= 1
    transfer_id = str(uuid.uuid4())
    api.gql(CREATE_TRANSFER, {"id": transfer_id, "from": funded, "to": opening, "amount": 4})
    assert balance(api, funded) == 6
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM transfers WHERE id = %s", (transfer_id,)).fetchone()[0] == 1
