"""Fixtures of the fault battery: the acceptance tests' real workers, a ledger per test, and the
throwaway PostgreSQL cluster (``pgcluster.py``) of the tests that restart a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.conftest import start_worker, worker_env

from .harness import Ledger
from .pgcluster import cluster_db, cluster_worker, pgcluster

__all__ = ["cluster_db", "cluster_worker", "ledger", "pgcluster", "start_worker", "worker_env"]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")
