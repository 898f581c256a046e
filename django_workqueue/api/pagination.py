"""Cursor pagination of job and workflow lists: newest first, by id.

A cursor page costs the same at the millionth job as at the first (``WHERE id < …
ORDER BY id DESC LIMIT n`` on the primary key), where an offset would scan every row before it,
and new jobs arriving while an operator pages do not shift the pages.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination

from ..filter_values import MAX_ID


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500

    def decode_cursor(self, request: Any) -> Cursor | None:
        """The cursor, or 400 for one this API did not make (DRF answers 404)."""
        problem = "this cursor was not made by this API; follow the next and previous links"
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": problem}) from None
        position = None if cursor is None else cursor.position
        if position is not None and not (
            position.isascii() and position.isdigit() and int(position) <= MAX_ID
        ):
            raise ValidationError({"cursor": problem})
        return cursor
