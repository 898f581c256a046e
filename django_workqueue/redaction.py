"""Secrets out of what users without the payload permission see: job arguments, results and
error messages.

The rules are Django's error-report rules (``SafeExceptionReporterFilter``, or the project's
``DEFAULT_EXCEPTION_REPORTER_FILTER`` when it derives from it): a dict value under a key that
``hidden_settings`` matches (``password``, ``token``, ``secret``, ``api_key``, …) becomes the
filter's ``cleansed_substitute``. Text gets the same rule for ``key=value`` and ``key: value``
pairs, plus the password of a URL (``postgres://user:pw@host``).

>>> redact({"user": "ada", "api_key": "k-123"})
{'user': 'ada', 'api_key': '********************'}
>>> redact("login failed: password=hunter2")
'login failed: password=********************'
"""

from __future__ import annotations

import functools
import re
from typing import Any

from django.views.debug import SafeExceptionReporterFilter, get_default_exception_reporter_filter

# A secret-looking key (the filter's hidden_settings inside a word), then = or : (a JSON or
# dict repr's quotes around it allowed), then the value: quoted, or a run up to a space or a
# separator; an Authorization scheme ("Bearer") goes with its value.
_PAIR = (
    r"""(?P<key>[\w-]*(?:{hidden})[\w-]*)(?P<sep>["']?\s*[:=]\s*)(?P<quote>["']?)"""
    r"""(?P<value>(?:(?:Bearer|Basic|Token)\s+)?[^"'\s,;&}}\])]*)"""
)
_NOT_A_KEY = re.compile(r"(Error|Exception|Warning)$")  # "KeyError: 'x'" names no secret
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/\s@]*:)[^@\s/]+(?P<at>@)")


def redact(value: Any) -> Any:
    """``value`` (JSON: dicts, lists, strings, numbers) with its secrets replaced; a new
    object, the argument is left as it was."""
    rules = _rules()
    return _text_in(rules, rules.cleanse_setting("", value))


def redact_text(text: str) -> str:
    """``text`` with the values of secret-looking ``key=value`` pairs and URL passwords
    replaced."""
    return _redact_text(_rules(), text)


def _rules() -> SafeExceptionReporterFilter:
    configured = get_default_exception_reporter_filter()
    if isinstance(configured, SafeExceptionReporterFilter):
        return configured
    return SafeExceptionReporterFilter()


def _text_in(rules: SafeExceptionReporterFilter, value: Any) -> Any:
    if isinstance(value, str):
        return _redact_text(rules, value)
    if isinstance(value, dict):
        return {key: _text_in(rules, item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_text_in(rules, item) for item in value)
    return value


def _redact_text(rules: SafeExceptionReporterFilter, text: str) -> str:
    substitute = rules.cleansed_substitute

    def pair(match: re.Match[str]) -> str:
        if not match["value"] or _NOT_A_KEY.search(match["key"]):
            return match[0]
        return f"{match['key']}{match['sep']}{match['quote']}{substitute}"

    text = _pairs(rules.hidden_settings).sub(pair, text)
    return _URL_PASSWORD.sub(lambda match: f"{match['head']}{substitute}{match['at']}", text)


@functools.lru_cache(maxsize=8)
def _pairs(hidden: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(_PAIR.format(hidden=hidden.pattern), hidden.flags)
