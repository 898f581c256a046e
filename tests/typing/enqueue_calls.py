"""Checked by mypy, never run (tests/typing/test_task_types.py): a line ending in ``# error``
must be a type error, every other line must not. What ``Task[P, R]`` lets mypy check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_workqueue import JobContext, Task, task

if TYPE_CHECKING:
    from django_workqueue.models import Job


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue="mail", max_attempts=5)
def send_receipt(order_id: int, *, copy_to: str = "") -> dict[str, str]:
    return {"sent": str(order_id)}


@task(max_attempts=3)
def export_orders(context: JobContext, since: str) -> int:
    return len(since)


@task
async def fetch(url: str) -> str:
    return url


def calls_that_fit(context: JobContext) -> list[Job]:
    total: int = add(1, 2)
    exported: int = export_orders(context, "2026-01-01")
    assert total and exported
    return [
        add.enqueue(1, 2),
        add.enqueue(1, b=2),
        add.using(priority=5, queue="mail").enqueue(a=1, b=2),
        send_receipt.enqueue(42),
        send_receipt.enqueue(42, copy_to="a@example.com"),
        send_receipt.using(delay=60).enqueue(42),
        export_orders.enqueue("2026-01-01"),
        export_orders.using(unique_key="export:daily").enqueue(since="2026-01-01"),
        fetch.enqueue("https://example.com"),
    ]


def a_task_is_a_task_of_its_parameters() -> None:
    typed: Task[[int, int], int] = add
    kept: Task[[int, int], int] = add.using(delay=5)
    context_task: Task[[str], int] = export_orders
    assert typed and kept and context_task


def calls_that_do_not_fit(context: JobContext) -> None:
    add.enqueue(1)  # error
    add.enqueue(1, "2")  # error
    add.enqueue(1, 2, 3)  # error
    add.enqueue(1, c=2)  # error
    add.using(priority=5).enqueue("1", 2)  # error
    send_receipt.enqueue(1, 2)  # error
    send_receipt.enqueue(1, copy_to=3)  # error
    export_orders.enqueue()  # error
    export_orders.enqueue(context, "2026-01-01")  # error
    export_orders.enqueue(7)  # error
    export_orders("2026-01-01")  # error
    fetch.enqueue(1)  # error
    wrong: Task[[str], int] = add  # error
    assert wrong


async def awaited_calls_that_fit() -> list[Job]:
    jobs = [
        await add.aenqueue(1, 2),
        await add.using(delay=5, unique_key="k").aenqueue(a=1, b=2),
        await export_orders.aenqueue("2026-01-01"),
    ]
    return jobs + await add.aenqueue_many([((1, 2), {})])


async def awaited_calls_that_do_not_fit() -> None:
    await add.aenqueue(1, "2")  # error
    await add.using(priority=5).aenqueue(1)  # error
    await export_orders.aenqueue(7)  # error
