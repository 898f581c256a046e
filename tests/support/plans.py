"""EXPLAIN of statements the PostgreSQL driver sent, captured with ``execute_wrapper``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from django_workqueue.db.postgresql import _NO_SORTS

PREFIX = f"{_NO_SORTS}; "


@contextmanager
def captured_statements() -> Iterator[list[tuple[str, Any]]]:
    """The (sql, params) the driver passes to the default connection's cursor inside the block,
    exactly as executed."""
    statements: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield statements


def explain(sql: str, params: Mapping[str, Any] | None) -> str:
    """The plan of a captured statement, as it was planned: one the driver sent behind the
    planner settings of ``_fetch_in_index_order`` is explained under them (in a transaction,
    which holds them for the EXPLAIN and then drops them)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if sql.startswith(PREFIX):
            cursor.execute(_NO_SORTS)
            sql = sql[len(PREFIX) :]
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())
