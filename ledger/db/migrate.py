"""Applies `migrations/*.sql` in name order, each once, under an advisory lock.

Runs as the connecting (owner) role. Concurrent `ledger migrate` runs serialize on the lock, and the
second finds nothing left to do.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# An arbitrary constant: the advisory-lock key for migrations ("ledger" in ASCII).
_LOCK_KEY = 0x6C6564676572


def pending_migrations(applied: set[str], directory: Path = MIGRATIONS_DIR) -> list[Path]:
    return [p for p in sorted(directory.glob("*.sql")) if p.name not in applied]


def apply_migrations(conninfo: str, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply what is pending; returns the names applied by this call."""
    applied_now: list[str] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ledger_schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            applied = {r[0] for r in conn.execute("SELECT name FROM ledger_schema_migrations")}
            for path in pending_migrations(applied, directory):
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute("INSERT INTO ledger_schema_migrations (name) VALUES (%s)", (path.name,))
                applied_now.append(path.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now
