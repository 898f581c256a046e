"""PostgreSQL housekeeping for the harness: one database per system, resets, VACUUM ANALYZE.

The server is ``BENCH_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432``); each system
gets its own database ``<BENCH_DB_PREFIX><system>`` (default ``bench_<system>``), created empty
and dropped at the end of the run. Two runs on one server need two prefixes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import psycopg

SERVER = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432").rstrip("/")
DATABASE_PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench_")


def url(database: str) -> str:
    return f"{SERVER}/{database}"


def execute(database: str, sql: str, params: Sequence[Any] | None = None) -> None:
    with psycopg.connect(url(database), autocommit=True) as connection:
        connection.execute(sql, params)


def rows(database: str, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url(database), autocommit=True) as connection:
        return connection.execute(sql, params).fetchall()


def scalar(database: str, sql: str, params: Sequence[Any] | None = None) -> Any:
    return rows(database, sql, params)[0][0]


def create_database(name: str) -> None:
    drop_database(name)
    execute("postgres", f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    execute("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def vacuum_analyze(database: str) -> None:
    """Run after every fill, for every system alike, so no one drains a table with stale stats."""
    execute(database, "VACUUM ANALYZE")


def reset(database: str, table_prefix: str) -> None:
    """Empty every table of one system (by name prefix), then VACUUM ANALYZE."""
    tables = [
        name
        for (name,) in rows(
            database,
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE %s",
            [table_prefix.replace("_", r"\_") + "%"],
        )
    ]
    if tables:
        quoted = ", ".join(f'"{name}"' for name in tables)
        execute(database, f"TRUNCATE {quoted} RESTART IDENTITY CASCADE")
    vacuum_analyze(database)


def server_version() -> str:
    return scalar("postgres", "SHOW server_version")
