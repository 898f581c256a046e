"""Pages of large tables without ``COUNT(*)`` over them.

A list page needs a count for its page links. Counting a million rows reads a million rows, so
the paginator asks the database for its estimate first (PostgreSQL: ``pg_class.reltuples`` for
the whole table, the planner's row estimate for a filter; see ``Driver.estimate_count``) and
uses it when it is far above ``EXACT_UP_TO``. Otherwise it counts exactly, up to
``EXACT_UP_TO`` (a count over a ``LIMIT``ed subquery stops there); past that, the count is the
estimate, or where there is none (SQLite) the cap itself, shown as "10000+".
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.core.paginator import Paginator

from ..db import driver_for

EXACT_UP_TO = 10_000
"""Counts up to this are exact; larger ones are estimates (or shown as this many and more)."""
TRUST_ESTIMATES_ABOVE = 2 * EXACT_UP_TO
"""An estimate above this is used without counting at all (the planner's estimates of small
sets are often far off, of large ones close enough for page links)."""


class EstimatedCountPaginator(Paginator):
    """A paginator whose ``count`` is exact up to ``EXACT_UP_TO`` and estimated above;
    ``approximate`` says which (the admin's pagination template shows "about" or "+")."""

    approximate = False
    estimated = False
    """True when the count above the cap came from the database's statistics."""

    @cached_property
    def count(self) -> int:
        queryset: Any = self.object_list
        estimate = driver_for(queryset.db).estimate_count(queryset)
        if estimate is not None and estimate > TRUST_ESTIMATES_ABOVE:
            # Far above the cap: an exact count would only confirm that there are many.
            self.approximate = self.estimated = True
            return estimate
        # Unordered: a count needs no sort, and the LIMIT lets the scan stop at the cap.
        exact = queryset.order_by()[: EXACT_UP_TO + 1].count()
        if exact <= EXACT_UP_TO:
            return int(exact)
        self.approximate = True
        if estimate is None or estimate <= EXACT_UP_TO:
            return EXACT_UP_TO + 1
        self.estimated = True
        return estimate
