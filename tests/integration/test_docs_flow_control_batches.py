"""The flow-control guide's section on batch tasks runs as written: its ``pycon`` session is
run as a doctest against a real worker serving the default queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.guides import Guide, registry_restored

GUIDE = Guide("flow-control")


def test_the_batches_section_runs_as_written(
    transactional_db: None, background_worker: Callable[..., Any]
) -> None:
    assert len(GUIDE.blocks("batches", "pycon")) == 1
    background_worker(queues=["default"])
    with registry_restored():
        assert GUIDE.run_sessions("batches") >= 5
