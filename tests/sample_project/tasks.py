"""The tasks of a small shop, written as a user of django-workqueue would write them.

Their effects are rows a test can look for (auth groups stand in for the shop's models).
"""

from __future__ import annotations

from django.contrib.auth.models import Group

from django_workqueue import Retry, task


@task(queue="mail")
def send_receipt(order_id: int) -> str:
    Group.objects.create(name=f"receipt-{order_id}")
    return f"receipt {order_id} sent"


@task
def reserve_stock(order_id: int) -> int:
    Group.objects.create(name=f"reserved-{order_id}")
    return order_id


@task
def ship(order_id: int) -> str:
    Group.objects.create(name=f"shipped-{order_id}")
    return f"shipped {order_id}"


@task(max_attempts=3, backoff=0)
def flaky_charge(context, order_id: int) -> str:  # type: ignore[no-untyped-def]
    if context.attempt < 3:
        raise Retry(delay=0)
    Group.objects.create(name=f"charged-{order_id}")
    return "charged"


@task(concurrency=1)
def print_label(order_id: int) -> str:
    return f"label {order_id}"


def confirm_order(order_id: int) -> None:
    """What a view would do: confirm, then enqueue the receipt (joining the transaction)."""
    send_receipt.enqueue(order_id)
