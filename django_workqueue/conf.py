"""Settings for django-workqueue, read from one namespaced dict: ``settings.WORKQUEUE``.

Every name has a default here; ``workqueue_settings`` is rebuilt whenever Django's
``setting_changed`` signal reports a change to ``WORKQUEUE`` or ``TASKS`` (``override_settings``
in tests). Values are validated by the system checks in ``checks.py``.

The queues that exist are the one list ``workqueue_settings.QUEUES`` (``queue_names``):
``WORKQUEUE["QUEUES"]`` followed by the ``QUEUES`` of every ``TASKS`` alias that runs on
django-workqueue. Enqueue, the checks, the backend, ``runworker`` and every operator surface
read that list, so a ``django.tasks`` project configures its queues once, in ``TASKS``.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import AppRegistryNotReady, ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

WORKQUEUE_BACKEND = "django_workqueue.backend.WorkqueueBackend"

DEFAULTS: dict[str, Any] = {
    # The database alias that holds the job tables. It should be the alias your code writes with,
    # so that enqueue joins your transaction; if not, enqueue is deferred to your commit.
    "DATABASE": "default",
    # Queues that exist, with those of every TASKS alias whose backend is WorkqueueBackend
    # (queue_names). Enqueueing to a queue not listed is an error; `runworker` without
    # --queues serves all of them. "default" is in unless this list is given without it.
    "QUEUES": ["default"],
    "DEFAULT_QUEUE": "default",
    "DEFAULT_PRIORITY": 0,
    "DEFAULT_MAX_ATTEMPTS": 3,
    # The crash budget: how many crashes (a worker seen gone, a lease that ran out) a job
    # survives, or its own max_attempts where that is larger (budgets.py).
    "MAX_CRASHES": 3,
    "DEFAULT_LEASE_SECONDS": 60,
    # Upper bound on JSON-encoded args + kwargs of one job, in bytes.
    "MAX_PAYLOAD_BYTES": 256 * 1024,
    # Upper bound on the JSON-encoded result a task may return, in bytes.
    "MAX_RESULT_BYTES": 256 * 1024,
    # How often an idle worker looks for work when no wake-up arrives (seconds): SQLite, or
    # PostgreSQL while the worker's LISTEN connection is down.
    "POLL_INTERVAL": 1.0,
    # The same while the worker hears NOTIFY (PostgreSQL): every enqueue and release wakes the
    # workers of its queue, so the poll is only a fallback; each wait is drawn between this and
    # 1.5 times this, so that a fleet does not poll in step. A reconnected listener polls at once.
    "LISTEN_POLL_INTERVAL": 60.0,
    # Longest gap between two lease renewals; shorter leases renew at a third of their length.
    "HEARTBEAT_INTERVAL": 10.0,
    # How often a worker with no job marks its WorkerProcess row seen (it has no lease to renew).
    "IDLE_HEARTBEAT_INTERVAL": 60.0,
    # One worker per jobs database runs the maintenance services (promoter, reaper, scheduler,
    # retention): the holder of a lease of this many seconds, renewed at a third of it. When the
    # holder dies another worker takes over within about this long.
    "MAINTENANCE_LEASE_SECONDS": 60.0,
    # How many workers watch the maintainer on PostgreSQL (each on one more direct connection)
    # to take over within about a second of its death; the others take over when its lease runs
    # out. 0: none watch. SQLite workers all watch (a look at a pid, no connection).
    "MAINTAINER_STANDBYS": 2,
    # Claim ahead of free slots: each worker keeps up to this many claimed jobs per slot in a
    # local buffer (rounded up), so that a slot that frees takes its next job at once. Plain
    # jobs never claimed before only; a worker with per-queue slots or autoscaling never claims
    # ahead. 0: off.
    "CLAIM_AHEAD": 0,
    # While the maintainer hears NOTIFY, its promoter and scheduler sleep until the next
    # scheduled job or cron tick they know of, at most this long (seconds).
    "MAINTENANCE_IDLE_INTERVAL": 10.0,
    # How often the maintainer runs the reaper (expired leases) at most.
    "REAPER_INTERVAL": 5.0,
    # How often the maintainer moves scheduled jobs whose time has come to ready: a delayed job
    # starts within this long of its run_after.
    "PROMOTE_INTERVAL": 1.0,
    # How long SIGTERM waits for running jobs before releasing them back to ready.
    "SHUTDOWN_GRACE_SECONDS": 30.0,
    # Use LISTEN/NOTIFY on PostgreSQL for instant wake-ups (polling stays on as a fallback).
    "LISTEN_NOTIFY": True,
    # A DSN for the LISTEN connection when the jobs database goes through a pooler that drops
    # NOTIFY (PgBouncer in transaction mode); keywords it leaves out come from the jobs
    # database's settings. None: the jobs database's own settings.
    "LISTEN_DSN": None,
    # On PostgreSQL, run the enqueue statements as server-side prepared statements (parsed and
    # planned once per connection). PgBouncer in transaction mode needs 1.21 or later with
    # max_prepared_statements set; False for older poolers (docs/guides/deployment.md).
    "PREPARED_STATEMENTS": True,
    # Exponential backoff for retries: base * 2 ** (attempt - 1) seconds, capped, with jitter.
    "RETRY_BACKOFF_BASE": 2.0,
    "RETRY_BACKOFF_MAX": 3600.0,
    "RETRY_JITTER": 0.1,
    # How often the maintainer looks for cron ticks that are due (seconds): a tick fires within
    # this long of its time, once (a unique key per tick, whichever worker fires it).
    "SCHEDULER_INTERVAL": 1.0,
    # Cron schedules: name -> {"task", "cron", "timezone", "args", "kwargs", "queue", "enabled",
    # "catch_up"}, synced into the Schedule table at worker start (docs/guides/scheduling.md).
    "SCHEDULES": {},
    # With catch_up="none", a due tick older than this many seconds counts as missed and is
    # skipped (a worker that was merely busy still fires it).
    "SCHEDULE_MISFIRE_GRACE": 60.0,
    # A callable (dotted path) given the worker's live stats (django_workqueue.flow.WorkerStats)
    # that returns seconds to wait before the next claim; None: claim whenever slots are free.
    # See docs/guides/flow-control.md#backpressure.
    "BACKPRESSURE": None,
    # Seconds of history in the stats the backpressure hook gets (claimed, succeeded, failed).
    "BACKPRESSURE_WINDOW": 30.0,
    # An autoscaling worker (runworker --concurrency MIN-MAX) shrinks after this many seconds
    # to the most slots that were busy at once meanwhile (never below MIN).
    "AUTOSCALE_IDLE_SECONDS": 30.0,
    # How long an idempotency claim (context.claim) is kept, in seconds: within it the key is
    # taken; after it the key can be claimed again and the reaper deletes the row.
    "CLAIM_TTL": 7 * 24 * 3600,
    # Days finished jobs are kept, per final status (None: forever); one worker of the fleet
    # deletes older ones (and finished workflows with them) in batches. A dict given here is
    # merged over this one. See docs/guides/observability.md#retention.
    "RETENTION": {"succeeded": 7, "failed": 30, "cancelled": 7},
    # At most one progress write per running job per this many seconds (context.set_progress):
    # a tight loop of reports costs one write per interval; the last report is always written,
    # at the latest with the job's outcome.
    "PROGRESS_INTERVAL": 1.0,
    # A secret a Prometheus scraper sends as "Authorization: Bearer <token>" to read
    # django_workqueue.views.metrics; None: only users with django_workqueue.view_job may.
    "METRICS_TOKEN": None,
    # manage.py workqueue --user NAME acts for that user: it checks the user's workqueue
    # permissions and audits under their name. True: the command refuses to run without
    # --user (docs/reference/cli.md#permissions).
    "CLI_REQUIRE_USER": False,
    # How live progress reaches the websockets (the optional realtime extra, docs/guides/
    # realtime.md): "database" (the web process follows the rows; no Redis), "channel_layer"
    # (the worker's signals publish to CHANNEL_LAYERS, e.g. channels-redis), or None (off).
    "REALTIME": "database",
    # How often the "database" mode reads what its websockets follow (seconds, per process).
    "REALTIME_POLL_INTERVAL": 0.5,
    # Task modules imported at start-up besides each installed app's ``tasks`` module.
    "TASK_MODULES": [],
    # Attempt middlewares: dotted paths of factories make(next_call) -> call(context) wrapping
    # every attempt, the first listed outermost (docs/guides/observability.md#middleware).
    "MIDDLEWARE": [],
    # Tests and local development: every job runs in the enqueueing process right after its
    # enqueue commits, through the worker's own code path, with the jobs it releases
    # (django_workqueue.testing; docs/guides/testing.md). Never in production.
    "EAGER": False,
}


class WorkqueueSettings:
    """Attribute access to ``settings.WORKQUEUE`` merged over ``DEFAULTS``."""

    def __init__(self) -> None:
        self._user: dict[str, Any] | None = None
        self._queues: list[str] | None = None
        self._lock = threading.Lock()

    @property
    def user(self) -> dict[str, Any]:
        if self._user is None:
            self._user = dict(getattr(settings, "WORKQUEUE", {}) or {})
        return self._user

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown WORKQUEUE setting {name!r}")
        user = self.user
        value = user.get(name, DEFAULTS[name])
        # Kept as an attribute until ``reload``: the next read is a plain attribute look-up
        # (this method runs only after one failed; the worker reads settings on every job).
        # Not if a reload came meanwhile: the value read is of the settings before it.
        with self._lock:
            if self._user is user:
                self.__dict__[name] = value
        return value

    @property
    def QUEUES(self) -> Any:
        """Every queue that exists (``queue_names``); what ``WORKQUEUE["QUEUES"]`` holds if
        it is not a list of names (the checks report it)."""
        configured = self.user.get("QUEUES", DEFAULTS["QUEUES"])
        if not isinstance(configured, list | tuple):
            return configured
        if self._queues is None:
            self._queues = queue_names(configured, workqueue_aliases())
        return self._queues

    def reload(self) -> None:
        with self._lock:
            for name in [name for name in self.__dict__ if name in DEFAULTS]:
                del self.__dict__[name]
            self._user = None
        self._queues = None


workqueue_settings = WorkqueueSettings()


def queue_names(configured: Any, aliases: dict[str, list[str]]) -> list[str]:
    """``WORKQUEUE["QUEUES"]`` followed by each alias's queues not already named, in order.

    >>> queue_names(["default"], {"default": ["default", "emails"]})
    ['default', 'emails']
    """
    names = list(configured)
    for queues in aliases.values():
        names += [name for name in queues if name not in names]
    return names


def workqueue_aliases() -> dict[str, list[str]]:
    """The ``TASKS`` aliases that run on django-workqueue, each with its ``QUEUES`` (Django's
    default: ``["default"]``); an alias whose backend cannot be imported is not ours."""
    aliases: dict[str, list[str]] = {}
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return aliases
    for alias, params in tasks.items():
        if isinstance(params, dict) and runs_on_workqueue(params.get("BACKEND")):
            queues = params.get("QUEUES", ["default"])
            if isinstance(queues, list | tuple | set | frozenset):
                aliases[alias] = [q for q in queues if isinstance(q, str) and q]
    return aliases


def runs_on_workqueue(backend: Any) -> bool:
    """Whether a ``TASKS`` ``BACKEND`` path is ``WorkqueueBackend`` or a subclass of it."""
    if backend == WORKQUEUE_BACKEND:
        return True
    if not isinstance(backend, str):
        return False
    try:
        # Imported by path: this module sits below the backend and cannot import it.
        return bool(getattr(import_string(backend), "runs_on_workqueue", False))
    except (ImportError, ImproperlyConfigured, AppRegistryNotReady):
        return False


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting in ("WORKQUEUE", "TASKS"):
        workqueue_settings.reload()


setting_changed.connect(_reload)
