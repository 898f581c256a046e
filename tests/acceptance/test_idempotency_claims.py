"""``context.claim`` raced by eight OS processes: each key is won by exactly one of them, also
when every key holds an expired claim to take over.

PostgreSQL only: there the processes' upserts run concurrently and meet on the key's unique
index; SQLite runs every claim behind its single write lock, one at a time.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from django_workqueue.models import IdempotencyClaim
from tests.support.database import db_now
from tests.support.processes import REPO_ROOT
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres_only,
]

PROCESSES = 8
KEYS = 200


def race(env: dict[str, str], where: Path) -> dict[int, list[str]]:
    """Start the racers (job ids 1-8), start them together, return the keys each won."""
    go = where / "go"
    command = [sys.executable, "-m", "tests.support.flow_process", "claim-race"]
    racers = [
        subprocess.Popen(
            [*command, str(job_id), str(KEYS), str(go)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job_id in range(1, PROCESSES + 1)
    ]
    try:
        wait_until(
            lambda: len(list(where.glob("go.ready.*"))) == PROCESSES,
            timeout=60,
            message="every racer to connect",
        )
        go.touch()  # every racer is connected: all start together
        outputs = [racer.communicate(timeout=120) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()
    assert [racer.returncode for racer in racers] == [0] * PROCESSES, outputs
    return {job_id: json.loads(out) for job_id, (out, _) in enumerate(outputs, 1)}


def assert_each_key_won_once(won: dict[int, list[str]]) -> None:
    wins = Counter(key for keys in won.values() for key in keys)
    assert len(wins) == KEYS
    assert set(wins.values()) == {1}
    # The rows agree with what each process was told.
    owners = dict(IdempotencyClaim.objects.values_list("key", "job_id"))
    assert owners == {key: job_id for job_id, keys in won.items() for key in keys}
    # A race, not a queue: more than one process won keys.
    assert sum(1 for keys in won.values() if keys) > 1


def test_eight_processes_racing_for_new_keys_win_each_key_once(
    worker_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    assert_each_key_won_once(race(worker_env(), tmp_path))


def test_eight_processes_racing_to_take_over_expired_claims_win_each_key_once(
    worker_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    expired = db_now() - dt.timedelta(seconds=1)
    IdempotencyClaim.objects.bulk_create(
        IdempotencyClaim(key=f"key-{n}", job_id=0, expires_at=expired) for n in range(KEYS)
    )

    assert_each_key_won_once(race(worker_env(), tmp_path))
