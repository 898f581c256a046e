"""``runworker --queues`` and ``--concurrency``: the plain functions that parse and combine them
(per-queue slots, a shared pool, an autoscaling range) before any worker exists."""

from __future__ import annotations

import argparse

import pytest
from django.core.management import CommandError

from django_workqueue.management.commands.runworker import queue_list, slot_options, slot_range
from django_workqueue.worker.slots import MAX_SLOTS


def test_queues_with_and_without_slots_are_parsed():
    assert queue_list("default,mail") == [("default", None), ("mail", None)]
    assert queue_list(" default:8 , mail:2 ") == [("default", 8), ("mail", 2)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("default:0", "0 must be at least 1"),
        ("default:x", "'x' is not a whole number"),
        (":3", "':3' has no queue name; write NAME:SLOTS"),
        ("default:2,default:3", "queue 'default' is given twice"),
    ],
)
def test_bad_queue_slots_are_refused(value, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        queue_list(value)


def test_concurrency_is_a_number_or_a_range():
    assert slot_range("4") == (4, None)
    assert slot_range("2-32") == (2, 32)
    assert slot_range("3-3") == (3, 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("32-2", "32-2: the floor 32 is above the ceiling 2; write MIN-MAX, e.g. 2-32"),
        ("0-4", "0 must be at least 1"),
        ("2-", "'' is not a whole number"),
        (f"2-{MAX_SLOTS + 1}", f"{MAX_SLOTS + 1} slots is more than one worker may run"),
        (str(MAX_SLOTS + 1), "Run more worker processes instead"),
    ],
)
def test_bad_concurrency_is_refused(value, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        slot_range(value)


def test_plain_queues_share_the_concurrency():
    assert slot_options([("a", None), ("b", None)], (4, None)) == {
        "queues": ["a", "b"], "concurrency": 4, "max_concurrency": None,
    }  # fmt: skip
    assert slot_options(None, None) == {"queues": None, "concurrency": 1, "max_concurrency": None}


def test_a_range_autoscales():
    assert slot_options(None, (2, 32)) == {"queues": None, "concurrency": 2, "max_concurrency": 32}


def test_queue_slots_become_the_workers_budgets():
    assert slot_options([("default", 8), ("mail", 2)], None) == {
        "queue_slots": {"default": 8, "mail": 2}
    }


def test_mixing_queues_with_and_without_slots_names_the_fix():
    with pytest.raises(CommandError) as raised:
        slot_options([("a", 8), ("b", None)], None)

    assert str(raised.value) == (
        "--queues gives slots to some queues but not to b: give every queue its slots "
        "(e.g. --queues a:8,b:1), or none and --concurrency N for all"
    )


@pytest.mark.parametrize("concurrency", [(4, None), (2, 8)])
def test_queue_slots_with_concurrency_names_the_fix(concurrency):
    with pytest.raises(CommandError) as raised:
        slot_options([("a", 8), ("b", 2)], concurrency)

    assert str(raised.value) == (
        "--concurrency cannot be combined with slots per queue (--queues a:8,b:2): the worker "
        "runs their sum. Drop --concurrency, or drop the :SLOTS from --queues to share "
        "--concurrency slots"
    )


def test_queue_slots_beyond_the_bound_are_refused():
    with pytest.raises(CommandError, match="Run more worker processes instead"):
        slot_options([("a", MAX_SLOTS), ("b", 1)], None)


def test_raw_values_from_call_command_are_parsed_too():
    """``call_command("runworker", concurrency=4)`` hands the value over unparsed."""
    assert slot_options(["default", "mail"], 4) == {
        "queues": ["default", "mail"], "concurrency": 4, "max_concurrency": None,
    }  # fmt: skip
    assert slot_options("default:2,mail:1", None) == {"queue_slots": {"default": 2, "mail": 1}}
    assert slot_options(None, "2-8")["max_concurrency"] == 8
    with pytest.raises(CommandError, match="0 must be at least 1"):
        slot_options(None, 0)
