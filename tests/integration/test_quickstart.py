"""The quickstart's code runs as written: its ``shop/tasks.py`` and its ``using()`` examples are
read from docs/quickstart.md, imported as a ``shop`` app over a stand-in ``Order`` model, and
run by a real worker with every warning an error (a naive-datetime ``RuntimeWarning`` from the
date example once failed every export)."""

from __future__ import annotations

import datetime as dt
import importlib
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.db import connection, models
from django.utils import timezone

from django_workqueue import registry
from django_workqueue.models import Job
from django_workqueue.states import Status

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


class Order(models.Model):
    """The fields of ``shop.models.Order`` that the quickstart's tasks use. Its table exists
    only during these tests (the ``quickstart_order`` fixture); no migration creates it."""

    email = models.EmailField()
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "testapp"
        db_table = "quickstart_order"

    def __str__(self) -> str:
        return f"order {self.pk} of {self.email}"


def python_block(containing: str) -> str:
    """The one ```python block of the quickstart that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", QUICKSTART.read_text(), flags=re.DOTALL)
    [block] = [block for block in blocks if containing in block]
    return block


@pytest.fixture
def shop(transactional_db: None, tmp_path: Path) -> Iterator[ModuleType]:
    """``shop.tasks`` from the quickstart, importable, with its table and registry cleaned up."""
    with connection.schema_editor() as editor:
        editor.create_model(Order)
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(f"from {__name__} import Order  # noqa: F401\n")
    (package / "tasks.py").write_text(python_block("# shop/tasks.py"))
    saved = dict(registry._registry)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("shop.tasks")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
            del sys.modules[name]
        registry._registry.clear()
        registry._registry.update(saved)
        with connection.schema_editor() as editor:
            editor.delete_model(Order)


def test_the_quickstart_examples_run_without_warnings(shop: ModuleType, drain: Any) -> None:
    mailed: list[str] = []
    written: list[int] = []
    # The helpers the quickstart leaves to the reader.
    shop.mail_receipt = lambda order: mailed.append(order.email)  # type: ignore[attr-defined]
    shop.write_row = lambda order: written.append(order.pk)  # type: ignore[attr-defined]
    utc = dt.UTC
    old = Order.objects.create(
        email="old@example.com", created=dt.datetime(2025, 12, 31, tzinfo=utc)
    )
    new = [
        Order.objects.create(email=f"n{n}@example.com", created=dt.datetime(2026, 1, 2, tzinfo=utc))
        for n in range(3)
    ]
    namespace = {
        "send_receipt": shop.send_receipt,
        "export_orders": shop.export_orders,
        "order": new[0],
        "order_ids": [old.pk, new[1].pk],
    }

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the slot threads share these filters
        exec(python_block("send_receipt.using(delay=60)"), namespace)
        drain(concurrency=2)

    export = Job.objects.get(task_name="shop.tasks.export_orders")
    assert (export.status, export.errors, export.result) == (Status.SUCCEEDED, [], 3)
    assert sorted(written) == sorted(order.pk for order in new)
    receipts = Job.objects.filter(task_name="shop.tasks.send_receipt")
    # One receipt waits out its delay; the other three ran (the enqueue_many one for two orders).
    assert (
        sorted(receipts.values_list("status", flat=True))
        == [Status.SCHEDULED] + [Status.SUCCEEDED] * 3
    )
    assert sorted(mailed) == sorted(["n0@example.com", "old@example.com", "n1@example.com"])
    assert not any(job.errors for job in receipts)


def test_the_quickstart_shows_the_order_model_its_examples_use() -> None:
    model = python_block("# shop/models.py")

    assert "class Order(models.Model):" in model
    # The fields its tasks read (the stand-in above) and its view writes.
    for name in [field.name for field in Order._meta.fields if field.name != "id"]:
        assert f"    {name} = models." in model, name
    view = python_block("# shop/views.py")
    for name in re.findall(r"Order\.objects\.create\(([^)]*)\)", view)[0].split(","):
        assert f"    {name.split('=')[0].strip()} = models." in model
