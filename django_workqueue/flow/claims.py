"""Idempotency claims: ``context.claim(key)`` is True for the first claimer of a key only.

A claim is a row of ``IdempotencyClaim`` (the key is its primary key), written by one
statement that inserts it or takes over a claim whose ``expires_at`` has passed
(``Driver.take_claim``): of any number of workers, processes and attempts claiming a key at
once, exactly one gets True. A claim is kept for ``WORKQUEUE["CLAIM_TTL"]`` seconds (or the
call's ``ttl``) from the database's clock; the reaper deletes expired claims in bounded batches.

Where the claim is written decides what a crash does to it:

* in a task without ``atomic=True`` it commits at once, on its own: also inside a
  ``transaction.atomic()`` the body opened (on PostgreSQL through a short-lived connection of
  its own). An attempt that crashes after the claim leaves it taken, and the retry skips the
  side effect: at most once.
* in an ``atomic=True`` task it joins the task's transaction: it commits with the body's writes
  and the recorded success, or rolls back with a failed attempt, which frees the key for the
  retry: exactly once, together with the task's own database writes.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections

from ..conf import workqueue_settings as conf
from ..exceptions import InvalidOption
from ..payload import describe, unstorable_text

if TYPE_CHECKING:
    from ..db import Driver

MAX_KEY_LENGTH = 255
# Far beyond any use and near enough that the database's clock plus it is still a date every
# database and Python can hold.
MAX_TTL = 100 * 365 * 24 * 3600


def claim(
    driver: Driver, key: Any, *, job_id: int | None, ttl: Any = None, joins: bool = False
) -> bool:
    """Take ``key`` for ``job_id``; return whether this call took it.

    ``joins``: write the claim in the current transaction of this thread's connection to the
    jobs database (an ``atomic=True`` task's); otherwise it commits at once, on its own.
    """
    key = check_key(key)
    seconds = check_ttl("context.claim: ttl", conf.CLAIM_TTL if ttl is None else ttl)
    connection = driver.connection
    if joins or not connection.in_atomic_block:
        return driver.take_claim(key, job_id, seconds)
    if not driver.supports_separate_commit:
        raise InvalidOption(
            f"context.claim({key!r}) was called inside a transaction.atomic() block of a task "
            f"without atomic=True on {driver.vendor}, where the claim cannot commit apart from "
            f"that transaction (a second connection would wait for its write lock); claim "
            f"before opening the transaction, or make the task atomic=True so that the claim "
            f"commits with it"
        )
    # Commit apart from the body's open transaction: a connection of its own, for this call.
    separate = connections.create_connection(driver.alias)
    try:
        return driver.take_claim(key, job_id, seconds, connection=separate)
    finally:
        separate.close()


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH:
        raise InvalidOption(
            f"context.claim: key must be a non-empty string of at most {MAX_KEY_LENGTH} "
            f"characters, got {describe(key)}; name the side effect (e.g. "
            f'"charge:invoice-42"), and hash a longer name (hashlib.sha256(...).hexdigest())'
        )
    problem = unstorable_text(key)
    if problem is not None:  # the database would refuse it, or abort the transaction
        raise InvalidOption(f"context.claim: key {problem}")
    return key


def check_ttl(owner: str, ttl: Any) -> float:
    """Seconds a claim is kept: a positive number or timedelta, at most 100 years."""
    if isinstance(ttl, timedelta):
        ttl = ttl.total_seconds()
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL:
        raise InvalidOption(
            f"{owner} must be a positive number of seconds (or a timedelta) up to "
            f"{MAX_TTL:,} (100 years), got {describe(ttl)}"
        )
    return float(ttl)
