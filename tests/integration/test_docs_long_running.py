"""The long-running guide's order-approval section runs as written: its tasks module is imported
as an app of its own, and its ``pycon`` sessions are run as doctests, in order and in one
namespace (a step, a wait, a signal from outside, a sleep)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.guides import Guide, registry_restored

GUIDE = Guide("long-running")

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def orders_app(tmp_path: Path) -> Iterator[None]:
    [(_, tasks)] = [
        b for b in GUIDE.blocks("order-approval", "python") if "# orders/tasks.py" in b[1]
    ]
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "__init__.py").write_text("")
    (tmp_path / "orders" / "tasks.py").write_text(tasks)
    sys.path.insert(0, str(tmp_path))
    with registry_restored():
        importlib.import_module("orders.tasks")
        yield
    sys.path.remove(str(tmp_path))
    for module in [m for m in sys.modules if m.split(".")[0] == "orders"]:
        del sys.modules[module]


def test_the_order_approval_section_runs_as_written(orders_app: None) -> None:
    assert len(GUIDE.blocks("order-approval", "pycon")) == 3
    assert GUIDE.run_sessions("order-approval") >= 15
