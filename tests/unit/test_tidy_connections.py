"""``tidy_connections``: a slot's connections tidied between jobs, looked up cheaply."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connections

from django_workqueue.attempt.connections import tidy_connections

pytestmark = pytest.mark.django_db(transaction=True)


def _in_a_thread(body: Any) -> Any:
    """``body()``'s value, run in a new thread: its own connection wrappers, as a slot's."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = body()
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    if "error" in result:
        raise result["error"]
    return result.get("value")


def test_with_one_database_a_leaked_transaction_is_rolled_back_and_its_wrapper_replaced() -> None:
    def body() -> tuple[bool, bool]:
        leaked = connections["default"]
        leaked.set_autocommit(False)  # as a body that left an atomic block open
        leaked.in_atomic_block = True
        tidy_connections("default")
        fresh = connections["default"]
        return fresh is not leaked, fresh.in_atomic_block

    assert _in_a_thread(body) == (True, False)


def test_a_database_this_thread_never_used_is_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    # A second database whose backend cannot even be imported (an app's optional database,
    # say): tidying a slot that never used it must not try to make its wrapper.
    settings = {**connections.settings, "other": {**connections.settings["default"],
                                                   "ENGINE": "no.such.backend"}}  # fmt: skip
    monkeypatch.setitem(connections.__dict__, "settings", settings)

    def body() -> list[str]:
        connections["default"].ensure_connection()
        tidy_connections("default")  # would raise ImproperlyConfigured loading "other"
        return [conn.alias for conn in connections.all(initialized_only=True)]

    assert _in_a_thread(body) == ["default"]
