"""The one rule for filter and selection values: ids within 64 bits, texts a database can
compare, and, for an admin list's parameters, no number beyond an id's range."""

from __future__ import annotations

import pytest

from django_workqueue.exceptions import InvalidFilterValue
from django_workqueue.filter_values import MAX_ID, filter_text, object_id, query_value


@pytest.mark.parametrize("value", [1, "1", MAX_ID, str(MAX_ID)])
def test_an_id_from_1_to_2_63_minus_1_is_taken_as_an_int(value):
    assert object_id(value, "job") == int(value)


@pytest.mark.parametrize(
    "value", [0, -1, MAX_ID + 1, 10**30, str(10**30), "1.5", "١٢", " 1", "", None, True, 2.0]
)
def test_anything_else_is_not_an_id_and_the_message_says_what_is(value):
    with pytest.raises(
        InvalidFilterValue, match=r"^workflow .* is not a workflow id: give a whole"
    ):
        object_id(value, "workflow")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("mail\x00", "NUL"), ("mail\ud800", "lone surrogate"), ("", "non-empty"),
        (None, "non-empty"), ("x" * 256, "longer than 255"),
    ],
)  # fmt: skip
def test_a_text_the_database_cannot_compare_is_refused(value, problem):
    with pytest.raises(InvalidFilterValue, match=problem):
        filter_text(value, "queue")


def test_a_refused_value_is_quoted_escaped_and_cut_short():
    with pytest.raises(InvalidFilterValue) as refused:
        filter_text("\ud800" * 100 + "\x00", "queue")

    message = str(refused.value)
    assert message.isascii() and "\\ud800" in message and len(message) < 200


@pytest.mark.parametrize("value", ["", "mail", "42", "-42", str(MAX_ID), "x" * 1000])
def test_a_query_value_takes_texts_and_numbers_an_id_may_be(value):
    assert query_value(value, "q") == value


@pytest.mark.parametrize("value", [str(10**30), "-" + str(10**30), "\x00", "x" * 1001])
def test_a_query_value_refuses_numbers_beyond_an_id_and_bad_texts(value):
    with pytest.raises(InvalidFilterValue):
        query_value(value, "q")
