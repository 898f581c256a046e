"""The job filters of the API parsed from JSON values: what each accepts, and errors that name
the filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from rest_framework.exceptions import ValidationError

from django_workqueue.api.filters import MAX_VALUES, JobFilters, parse


def test_nothing_given_filters_nothing():
    filters = parse({})

    assert filters == JobFilters()
    assert not filters.given
    assert filters.as_target() == {}


def test_names_are_deduplicated_and_times_kept_in_utc():
    filters = parse({
        "status": ["failed", "failed", "held"], "queue": "mail", "workflow": "12",
        "created_after": "2026-01-31T12:00:00+02:00", "created_before": "2026-02-01T00:00:00",
    })  # fmt: skip

    assert filters.statuses == ("failed", "held")
    assert filters.queues == ("mail",)
    assert filters.workflow == 12
    assert filters.created_after == datetime(2026, 1, 31, 10, tzinfo=UTC)
    assert filters.created_before == datetime(2026, 2, 1, tzinfo=UTC)
    assert filters.as_target() == {
        "status": ["failed", "held"], "queue": ["mail"], "workflow": 12,
        "created_after": "2026-01-31T10:00:00+00:00",
        "created_before": "2026-02-01T00:00:00+00:00",
    }  # fmt: skip


def test_an_offset_beyond_what_databases_store_is_moved_to_utc():
    filters = parse({"created_after": "2026-01-01T00:00:00-17:59"})

    assert filters.created_after is not None
    assert filters.created_after.utcoffset() == timedelta(0)
    assert filters.created_after == datetime(
        2026, 1, 1, tzinfo=timezone(-timedelta(hours=17, minutes=59))
    )


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"status": ["dead"]}, "'dead' is not a job status"),
        ({"queue": [""]}, "is not a name: give a non-empty text"),
        ({"queue": ["x" * 256]}, "longer than 255 characters"),
        ({"queue": ["a\x00"]}, "contains a NUL character"),
        ({"task": ["t"] * (MAX_VALUES + 1)}, "give at most"),
        ({"task": [1]}, "give at most"),
        ({"workflow": True}, "is not a workflow id: give a whole number"),
        ({"workflow": "0"}, "is not a workflow id: give a whole number"),
        ({"workflow": str(2**63)}, "is not a workflow id: give a whole number"),
        ({"created_after": "tomorrow"}, "ISO 8601"),
        ({"created_after": 5}, "ISO 8601"),
        ({"created_before": "0001-01-01T00:00:00+05:00"}, "ISO 8601"),
    ],
)
def test_a_bad_value_is_named_with_what_the_filter_accepts(values, problem):
    with pytest.raises(ValidationError) as refused:
        parse(values)

    ((name, message),) = refused.value.detail.items()
    assert name == next(iter(values))
    assert problem in str(message)
