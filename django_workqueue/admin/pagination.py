"""Pages of large tables without ``COUNT(*)`` over them.

A list page needs a count for its page links. Counting a million rows reads a million rows, so
the paginator counts exactly only up to ``EXACT_UP_TO`` (a count over a ``LIMIT``ed subquery
stops there); past it, the count is the database's estimate (PostgreSQL: ``pg_class.reltuples``
for the whole table, the planner's row estimate for a filter; see ``Driver.estimate_count``),
or, where there is none (SQLite), the cap itself, shown as "10,000+".
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator

from ..db import driver_for

EXACT_UP_TO = 10_000
"""Counts up to this are exact; larger ones are estimates (or shown as this many and more)."""


class EstimatedCountPaginator(Paginator):
    """A paginator whose ``count`` is exact up to ``EXACT_UP_TO`` and estimated above;
    ``approximate`` says which (the admin's pagination template shows "about" or "+")."""

    approximate = False
    estimated = False
    """True when the count above the cap came from the database's statistics."""

    @cached_property
    def count(self) -> int:
        queryset: Any = self.object_list
        exact = queryset[: EXACT_UP_TO + 1].count()
        if exact <= EXACT_UP_TO:
            return int(exact)
        self.approximate = True
        estimate = driver_for(queryset.db).estimate_count(queryset)
        if estimate is None or estimate <= EXACT_UP_TO:
            return EXACT_UP_TO + 1
        self.estimated = True
        return estimate
