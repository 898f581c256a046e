"""Redaction of job arguments, results and error messages by Django's error-report rules."""

from __future__ import annotations

import copy

import pytest
from django.views.debug import SafeExceptionReporterFilter

from django_workqueue.redaction import redact, redact_text

HIDDEN = SafeExceptionReporterFilter.cleansed_substitute


class ShortSubstitute(SafeExceptionReporterFilter):
    cleansed_substitute = "[hidden]"


@pytest.mark.parametrize(
    "key", ["password", "api_key", "API_KEY", "auth_token", "secret", "Passwd"]
)
def test_a_secret_looking_key_has_its_value_replaced(key):
    assert redact({key: "s3cr3t", "user": "ada"}) == {key: HIDDEN, "user": "ada"}


def test_secrets_are_found_at_any_depth_of_lists_and_dicts():
    value = {"accounts": [{"name": "a", "token": "t1"}, {"name": "b", "token": "t2"}], "n": 3}

    assert redact(value) == {
        "accounts": [{"name": "a", "token": HIDDEN}, {"name": "b", "token": HIDDEN}], "n": 3,
    }  # fmt: skip


def test_a_secret_key_hides_its_whole_value_even_a_dict():
    assert redact({"credentials": {"user": "ada"}, "secret": {"user": "ada"}}) == {
        "credentials": {"user": "ada"},
        "secret": HIDDEN,
    }


def test_the_argument_is_left_unchanged():
    value = {"password": "p", "items": [{"token": "t"}]}
    before = copy.deepcopy(value)

    redact(value)

    assert value == before


@pytest.mark.parametrize(
    "value", [None, 3, 2.5, True, "plain words", ["a", 1], {"user": "ada", "count": 2}]
)
def test_values_without_secrets_come_back_equal(value):
    assert redact(value) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("login failed: password=hunter2", f"login failed: password={HIDDEN}"),
        ("API_KEY=abc123 and more", f"API_KEY={HIDDEN} and more"),
        ("{'api_key': 'abc', 'user': 'ada'}", f"{{'api_key': '{HIDDEN}', 'user': 'ada'}}"),
        ('{"auth_token": "abc", "n": 1}', f'{{"auth_token": "{HIDDEN}", "n": 1}}'),
        ("Authorization: Bearer abc.def next", f"Authorization: {HIDDEN} next"),
        ("postgres://bob:s3cr3t@db:5432/app", f"postgres://bob:{HIDDEN}@db:5432/app"),
        ("?user=ada&token=xyz&page=2", f"?user=ada&token={HIDDEN}&page=2"),
    ],
)
def test_secrets_in_text_are_replaced(text, expected):
    assert redact_text(text) == expected
    assert redact({"message": text}) == {"message": expected}


@pytest.mark.parametrize(
    "text",
    [
        "KeyError: 'api_key'",  # an exception's name is not a secret's
        "see https://api.example.com:8443/path",
        "user=ada page=2",
        "timeout after 30s",
    ],
)
def test_text_without_secrets_is_kept(text):
    assert redact_text(text) == text


def test_the_projects_exception_reporter_filter_sets_the_substitute(settings):
    from django.views.debug import get_default_exception_reporter_filter

    settings.DEFAULT_EXCEPTION_REPORTER_FILTER = f"{__name__}.ShortSubstitute"
    get_default_exception_reporter_filter.cache_clear()
    try:
        assert redact({"password": "p", "note": "token=t"}) == {
            "password": "[hidden]", "note": "token=[hidden]",
        }  # fmt: skip
    finally:
        get_default_exception_reporter_filter.cache_clear()
