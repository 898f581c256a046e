"""``claim_batches``: which groups are claimed, how often, and when the next is due (no
database: a driver that answers from a script)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from django_workqueue import Task
from django_workqueue.db import ClaimedJob
from django_workqueue.db.base import BatchClaim
from django_workqueue.flow.batches import Group, claim_batches
from testproject.testapp.tasks import batch_echo


def group(name: str, size: int = 3, wait: float = 10.0, queue: str = "default") -> Group:
    spec = dataclasses.replace(batch_echo.spec, name=name, batch_size=size, batch_wait=wait)
    return Group(queue=queue, task=Task(spec))


def jobs(count: int) -> list[ClaimedJob]:
    return [
        ClaimedJob(n, "t", "default", 0, 1, 3, 0, 60, None, False, "[[1], {}]")
        for n in range(count)
    ]


class ScriptedDriver:
    """Answers ``batch_backlog`` from ``backlog`` and each ``claim_batch`` of a key with the
    next of ``claims[key]`` (an exception is raised)."""

    def __init__(self, backlog: dict[str, tuple[int, float]], claims: dict[str, list[Any]]):
        self.backlog = backlog
        self.claims = claims
        self.claimed: list[str] = []

    def batch_backlog(self, groups, now=None):
        return {(q, k): self.backlog[k] for q, k, _ in groups if k in self.backlog}

    def claim_batch(self, queue, flow_key, size, wait, owner, now=None):
        self.claimed.append(flow_key)
        answer = self.claims[flow_key].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def key(name: str) -> str:
    return f"batch:{name}"


def test_a_filling_group_is_not_claimed_and_says_when_it_will_be_due():
    driver = ScriptedDriver({key("a"): (2, 7.5), key("b"): (1, 1.0)}, {})

    found = claim_batches(driver, ["default"], 4, "w", groups=[group("a"), group("b")])

    assert found.batches == [] and driver.claimed == []
    assert found.due_in == pytest.approx(2.5)  # a: 10 s wait, 7.5 s waited


def test_a_group_without_ready_jobs_costs_no_claim_and_no_due_time():
    driver = ScriptedDriver({}, {})

    found = claim_batches(driver, ["default"], 4, "w", groups=[group("a")])

    assert (found.batches, found.due_in, driver.claimed) == ([], None, [])


def test_a_full_group_gives_full_batches_until_the_slots_are_used():
    full = BatchClaim(jobs=jobs(3))
    driver = ScriptedDriver({key("a"): (3, 0.0)}, {key("a"): [full, full, full]})

    found = claim_batches(driver, ["default"], 2, "w", groups=[group("a")])

    assert [len(batch) for _, batch in found.batches] == [3, 3]
    assert driver.claimed == [key("a"), key("a")]


def test_a_group_stops_after_a_partial_batch():
    driver = ScriptedDriver(
        {key("a"): (2, 11.0)}, {key("a"): [BatchClaim(jobs=jobs(2)), BatchClaim(jobs=[])]}
    )

    found = claim_batches(driver, ["default"], 4, "w", groups=[group("a")])

    assert [len(batch) for _, batch in found.batches] == [2]
    assert driver.claimed == [key("a")]


def test_a_failed_claim_after_a_batch_hands_over_the_batch_and_before_raises():
    boom = ConnectionError("the database went away")
    claims = {key("a"): [BatchClaim(jobs=jobs(3)), boom], key("b"): [boom]}
    driver = ScriptedDriver({key("a"): (3, 0.0)}, claims)

    found = claim_batches(driver, ["default"], 4, "w", groups=[group("a")])

    assert [len(batch) for _, batch in found.batches] == [3]
    driver = ScriptedDriver({key("b"): (3, 0.0)}, claims)
    with pytest.raises(ConnectionError):
        claim_batches(driver, ["default"], 4, "w", groups=[group("b")])
