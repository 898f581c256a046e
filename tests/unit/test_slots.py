"""Slots: the autoscaler's rule, how claims share the free slots, and the pool's thread count as it
grows and shrinks (with a stand-in slot body: no database)."""

from __future__ import annotations

import queue
import threading

import pytest

from django_workqueue.worker.slots import Autoscaler, SlotPool
from tests.support.waiting import wait_until

# --- the autoscaler ------------------------------------------------------------------------


def scaler(floor: int = 2, ceiling: int = 16, idle: float = 30.0) -> Autoscaler:
    return Autoscaler(floor=floor, ceiling=ceiling, idle_seconds=idle)


def test_grows_by_what_a_claim_took_when_it_filled_every_free_slot():
    autoscaler = scaler()

    assert autoscaler.after_pass(now=0, slots=2, busy=2, free=2, claimed=2) == 4
    assert autoscaler.after_pass(now=0.1, slots=4, busy=4, free=2, claimed=2) == 6


def test_does_not_grow_when_the_claim_left_slots_free():
    """Fewer jobs than free slots: nothing waits (jobs a limit held back do not count)."""
    autoscaler = scaler()

    assert autoscaler.after_pass(now=0, slots=4, busy=3, free=4, claimed=3) == 4
    assert autoscaler.after_pass(now=0.1, slots=4, busy=0, free=4, claimed=0) == 4


def test_never_grows_past_the_ceiling():
    autoscaler = scaler(ceiling=5)

    assert autoscaler.after_pass(now=0, slots=4, busy=4, free=4, claimed=4) == 5
    assert autoscaler.after_pass(now=0.1, slots=5, busy=5, free=1, claimed=1) == 5


def test_shrinks_to_the_floor_after_an_idle_window():
    autoscaler = scaler(floor=2, idle=30)
    autoscaler.after_pass(now=0, slots=8, busy=0, free=8, claimed=0)

    assert autoscaler.after_pass(now=29.9, slots=8, busy=0, free=8, claimed=0) == 8
    assert autoscaler.after_pass(now=30.0, slots=8, busy=0, free=8, claimed=0) == 2


def test_shrinks_to_the_most_slots_busy_at_once_in_the_window():
    autoscaler = scaler(floor=2, idle=30)
    autoscaler.after_pass(now=0, slots=10, busy=1, free=10, claimed=0)
    autoscaler.after_pass(now=10, slots=10, busy=3, free=8, claimed=1)  # 3 right after the claim
    autoscaler.after_pass(now=20, slots=10, busy=1, free=9, claimed=0)

    assert autoscaler.after_pass(now=30, slots=10, busy=0, free=10, claimed=0) == 3


def test_a_growth_restarts_the_idle_window():
    autoscaler = scaler(floor=2, idle=30)
    autoscaler.after_pass(now=0, slots=2, busy=0, free=2, claimed=0)
    autoscaler.after_pass(now=25, slots=2, busy=2, free=2, claimed=2)  # -> 4, window from 25

    assert autoscaler.after_pass(now=40, slots=4, busy=0, free=4, claimed=0) == 4
    assert autoscaler.after_pass(now=55, slots=4, busy=0, free=4, claimed=0) == 2


def test_a_request_is_clamped_to_the_range():
    autoscaler = scaler(floor=2, ceiling=8)

    assert [autoscaler.clamp(n) for n in (1, 5, 50)] == [2, 5, 8]


# --- claims and the pool -------------------------------------------------------------------


def idle_slot(pool_box: dict[str, SlotPool], inbox: queue.SimpleQueue) -> None:
    """A slot body like the worker's: run what the inbox hands over, exit on a retiring None."""
    while True:
        handed = inbox.get()
        if handed is None:
            if pool_box["pool"].retire():
                return
            continue
        handed.wait(20)  # a "job": an event the test sets


def make_pool(size: int, **options) -> tuple[SlotPool, queue.SimpleQueue]:
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    box: dict[str, SlotPool] = {}
    pool = SlotPool.build(lambda: idle_slot(box, inbox), inbox, size, **options)
    box["pool"] = pool
    return pool, inbox


def alive(pool: SlotPool) -> int:
    return sum(thread.is_alive() for thread in pool.threads)


def test_a_shared_pool_claims_from_every_queue_at_once():
    pool, _ = make_pool(4)

    assert pool.claims(["default", "mail"], 3) == [(["default", "mail"], 3)]
    assert pool.claims(["default"], 0) == []


def test_per_queue_slots_claim_each_queue_up_to_its_free_slots():
    pool, _ = make_pool(1, queue_slots={"default": 3, "mail": 2})
    assert pool.size == 5
    pool.began("default")
    pool.began("default")
    pool.began("mail")
    pool.began("mail")

    assert pool.claims(["default", "mail"], 1) == [(["default"], 1)]
    pool.ended("mail")
    assert pool.claims(["default", "mail"], 2) == [(["default"], 1), (["mail"], 1)]


def test_per_queue_claims_never_exceed_the_free_slots_of_the_worker():
    pool, _ = make_pool(1, queue_slots={"default": 3, "mail": 2})

    assert pool.claims(["default", "mail"], 4) == [(["default"], 3), (["mail"], 1)]


def test_per_queue_slots_do_not_autoscale():
    with pytest.raises(ValueError, match="per-queue slots do not autoscale"):
        make_pool(1, queue_slots={"default": 3}, max_concurrency=8)


def test_shrinking_retires_slots_only_after_their_current_job():
    pool, inbox = make_pool(3)
    pool.start()
    jobs = [threading.Event() for _ in range(3)]
    for job in jobs:
        inbox.put(job)

    pool.resize(1, now=0, busy=3)
    assert alive(pool) == 3  # every slot is still in its job

    for job in jobs:
        job.set()
    wait_until(lambda: alive(pool) == 1, message="two slots retired after their jobs")
    pool.stop()
    wait_until(lambda: alive(pool) == 0, message="the last slot stopped")


def test_growing_again_before_a_shrink_took_effect_keeps_the_slots():
    pool, inbox = make_pool(3)
    pool.start()
    job = threading.Event()
    for _ in range(3):
        inbox.put(job)  # all three slots busy

    pool.resize(1, now=0, busy=3)  # two retirements queued behind the jobs
    pool.resize(3, now=0, busy=3)  # wanted after all: no thread is started or retired
    job.set()
    follow_up = threading.Event()
    follow_up.set()
    for _ in range(3):
        inbox.put(follow_up)

    wait_until(lambda: inbox.empty(), message="the inbox drained")
    assert alive(pool) == 3
    assert len(pool.threads) == 3
    pool.stop()
    wait_until(lambda: alive(pool) == 0, message="the slots stopped")
