"""The values a caller may filter or select on, checked before they reach a query: the one rule
for the admin's filters and search, the API's filters and action bodies, and the command's
selection.

A value the database cannot compare is a bad request, never a server error: an id beyond a
64-bit integer overflows SQLite's and PostgreSQL's integers, and PostgreSQL refuses text with a
NUL character or a lone surrogate. Texts are bounded too, so a filter costs what its index
costs.

>>> object_id("42", "workflow")
42
>>> object_id(10**30, "workflow")     # InvalidFilterValue: workflow 10000… is not a workflow id
"""

from __future__ import annotations

from typing import Any

from .exceptions import InvalidFilterValue
from .payload import unstorable_text

MAX_ID = 2**63 - 1
"""The largest id: every table's primary key is a signed 64-bit integer."""

MAX_TEXT = 255
"""The longest text a filter takes (the longest column it compares with: a unique key)."""

MAX_QUERY_VALUE = 1000
"""The longest value of any query parameter of an admin list (a search or a filter)."""


def object_id(value: Any, what: str) -> int:
    """``value`` (an int, or a string of ASCII digits) as an id from 1 to ``MAX_ID``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value)
    else:
        number = 0
    if not 0 < number <= MAX_ID:
        raise InvalidFilterValue(
            f"{what} {_shown(value)} is not a {what} id: give a whole number from 1 to 2**63 - 1"
        )
    return number


def filter_text(value: Any, what: str, *, max_length: int = MAX_TEXT) -> str:
    """``value`` as a text of 1 to ``max_length`` characters the database can compare."""
    if not isinstance(value, str) or not value:
        raise InvalidFilterValue(f"{what} {_shown(value)} is not a name: give a non-empty text")
    if len(value) > max_length:
        raise InvalidFilterValue(f"{what} is longer than {max_length} characters")
    problem = unstorable_text(value)
    if problem is not None:
        raise InvalidFilterValue(f"{what} {_shown(value)} {problem}; leave it out")
    return value


def query_value(value: str, what: str) -> str:
    """Any value of an admin list's query string, whose parameter may name a text or a
    number: a text ``filter_text`` takes (up to ``MAX_QUERY_VALUE`` characters), and no
    whole number beyond an id's range, which is no id and no name either."""
    if value == "":
        return value  # an empty filter is no filter
    filter_text(value, what, max_length=MAX_QUERY_VALUE)
    digits = value.strip().lstrip("+-")
    if digits.isascii() and digits.isdigit() and int(digits) > MAX_ID:
        raise InvalidFilterValue(f"{what} is a whole number beyond 2**63 - 1: no id is that large")
    return value


def _shown(value: Any) -> str:
    """``value`` quoted for a message: escaped (a NUL or a lone surrogate never reaches the
    answer as such) and cut short."""
    shown = ascii(value)
    return shown if len(shown) <= 40 else f"{shown[:37]}..."
