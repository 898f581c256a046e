"""Fixtures of the fault battery: the acceptance tests' real workers, and a ledger per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.conftest import start_worker, worker_env

from .harness import Ledger

__all__ = ["ledger", "start_worker", "worker_env"]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")
