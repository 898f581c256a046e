"""The lease of a fleet-wide maintenance service (``maintenance/leadership.py``) on SQLite and
PostgreSQL: one holder at a time, renewals, take-over after expiry, on a controlled clock."""

from __future__ import annotations

import datetime as dt

import pytest

from django_workqueue.maintenance.leadership import Leadership
from django_workqueue.models import MaintenanceLease

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def lease(owner: str, name: str = "retention") -> Leadership:
    return Leadership("default", name, owner=owner, seconds=180)


def row(name: str = "retention") -> MaintenanceLease:
    return MaintenanceLease.objects.get(pk=name)


def test_the_first_worker_takes_a_free_lease():
    assert lease("a").hold(now=at(0))

    assert (row().owner, row().expires_at, row().acquired_at) == ("a", at(180), at(0))


def test_a_held_lease_is_refused_to_others_until_it_expires_then_taken_over():
    a, b = lease("a"), lease("b")
    assert a.hold(now=at(0))

    assert not b.hold(now=at(10))
    assert a.hold(now=at(100))  # renewed: now expires at 280
    assert (row().expires_at, row().acquired_at) == (at(280), at(0))
    assert not b.hold(now=at(279))

    assert b.hold(now=at(281))  # a stopped renewing

    assert (row().owner, row().acquired_at) == ("b", at(281))
    assert not a.hold(now=at(282))  # the old holder learns it lost the lease
    assert not a.held and b.held


def test_leases_of_different_services_are_independent():
    assert lease("a", "retention").hold(now=at(0))

    assert lease("b", "stats").hold(now=at(0))

    assert {r.name: r.owner for r in MaintenanceLease.objects.all()} == {
        "retention": "a",
        "stats": "b",
    }


def test_a_released_lease_is_taken_at_once():
    a, b = lease("a"), lease("b")
    a.hold(now=at(0))

    assert a.release()

    assert b.hold(now=at(1))
    assert not a.release()  # b's lease is not a's to give up


def test_holder_reads_the_databases_clock():
    a = lease("a")
    assert lease("a").holder() is None
    a.hold()  # the database's clock

    assert a.holder() == "a"
    MaintenanceLease.objects.update(expires_at=at(0))  # long past

    assert a.holder() is None
