"""EXPLAIN of statements the PostgreSQL driver sent, captured with ``execute_wrapper``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from django_workqueue.db.postgresql import _PLAN_IN_ORDER, _PLAN_RESTORE, _PLAN_SAVE

# How ``PostgresDriver._fetch_in_index_order`` wraps a statement in one round trip.
PREFIX = f"{_PLAN_SAVE}; {_PLAN_IN_ORDER}; "
SUFFIX = f"; {_PLAN_RESTORE}"


@contextmanager
def captured_statements() -> Iterator[list[tuple[str, Any]]]:
    """The (sql, params) the driver passes to the default connection's cursor inside the block,
    exactly as executed; a statement run prepared with others in one pipeline
    (``_prepared_in_order``) with theirs around it, as one string would have carried them."""
    statements: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):
        before, after = getattr(context["cursor"].cursor, "around", ("", ""))
        statements.append((f"{before}{sql}{after}", params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield statements


def in_index_order(sql: str) -> str | None:
    """The statement ``sql`` wraps in the planner settings of ``_fetch_in_index_order``, if
    it does."""
    # A limited flow claim's statements carry its transaction's edges around the settings
    # (BEGIN or SAVEPOINT before, the running jobs' count and COMMIT or RELEASE after).
    start = sql.find(PREFIX)
    end = sql.find(SUFFIX, start)
    if start >= 0 and end >= 0:
        return sql[start + len(PREFIX) : end]
    # Sent prepared in one pipeline outside a caller's transaction (``_prepared_in_order``):
    # sorts off before it, nothing to put back after it (the settings end with the pipeline's
    # transaction); the statements after it, if any, follow "; ".
    start = sql.find(f"{_PLAN_IN_ORDER}; ")
    if start < 0:
        return None
    inner = sql[start + len(_PLAN_IN_ORDER) + 2 :]
    return inner.split("; ", 1)[0]


def explain(sql: str, params: Mapping[str, Any] | None, *, pinned: bool = True) -> str:
    """The plan of a captured statement, as it was planned: one the driver sent behind the
    settings of ``_fetch_in_index_order`` is explained under them (``pinned=False``: without)
    in a transaction that drops them."""
    inner = in_index_order(sql)
    with transaction.atomic(), connection.cursor() as cursor:
        if inner is not None:
            sql = inner
            if pinned:
                cursor.execute(_PLAN_IN_ORDER)
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def reads(plan: str, index: str) -> bool:
    """Whether ``plan`` reads ``index`` (the whole name: wq_job_flow is not wq_job_flow_running)."""
    return re.search(rf"\b{re.escape(index)}\b", plan) is not None
