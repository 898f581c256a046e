"""The flow-control guide's sections on slots, autoscaling and backpressure run as written: the
``pycon`` sessions of each section run as doctests, in order and in one namespace, against the
worker the section describes (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.guides import Guide

GUIDE = Guide("flow-control")

pytestmark = pytest.mark.django_db(transaction=True)


def run_sessions(section: str, expected_examples: int) -> None:
    assert GUIDE.run_sessions(section) == expected_examples


def test_the_slots_section_runs_as_written(background_worker: Callable[..., Any]) -> None:
    background_worker(queue_slots={"default": 8, "mail": 2})

    run_sessions("slots", expected_examples=2)


def test_the_autoscaling_section_runs_as_written(background_worker: Callable[..., Any]) -> None:
    background_worker(concurrency=2, max_concurrency=8)

    run_sessions("autoscaling", expected_examples=6)


def test_the_backpressure_section_runs_as_written() -> None:
    run_sessions("backpressure", expected_examples=6)
