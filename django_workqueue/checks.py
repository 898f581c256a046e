"""System checks: misconfiguration is reported by ``manage.py check`` and before ``runworker``."""

from __future__ import annotations

import difflib
import importlib.util
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.management import get_commands
from django.utils.module_loading import import_string

from .conf import DEFAULTS
from .conf import workqueue_settings as conf
from .db import driver_class
from .exceptions import InvalidOption
from .flow.claims import check_ttl
from .registry import import_errors, registered_tasks
from .schedules import schedule_problems
from .worker.ahead import claim_ahead_problem

_POSITIVE_NUMBERS = (
    "POLL_INTERVAL", "HEARTBEAT_INTERVAL", "REAPER_INTERVAL", "PROMOTE_INTERVAL",
    "RETRY_BACKOFF_MAX", "SCHEDULER_INTERVAL", "SCHEDULE_MISFIRE_GRACE",
    "BACKPRESSURE_WINDOW", "AUTOSCALE_IDLE_SECONDS", "PROGRESS_INTERVAL", "REALTIME_POLL_INTERVAL",
    "LISTEN_POLL_INTERVAL", "IDLE_HEARTBEAT_INTERVAL", "MAINTENANCE_LEASE_SECONDS",
    "MAINTENANCE_IDLE_INTERVAL",
)  # fmt: skip
_POSITIVE_INTS = (
    "MAX_PAYLOAD_BYTES", "MAX_RESULT_BYTES", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_LEASE_SECONDS",
    "MAX_CRASHES",
)  # fmt: skip


def _unknown_setting_hint(key: str) -> str:
    """The nearest setting name to a misspelt one, or where the list is when none is near."""
    near = difflib.get_close_matches(key.upper(), DEFAULTS, n=1, cutoff=0.6)
    if near:
        return f"Did you mean {near[0]!r}?"
    return "See docs/reference/settings.md for the settings there are."


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    user = getattr(settings, "WORKQUEUE", {})
    if not isinstance(user, dict):
        return [checks.Error("WORKQUEUE must be a dict.", id="django_workqueue.E002")]
    for key in sorted(set(user) - set(DEFAULTS)):
        errors.append(
            checks.Error(
                f"WORKQUEUE has an unknown setting {key!r}.",
                hint=_unknown_setting_hint(key),
                id="django_workqueue.E002",
            )
        )
    queues = conf.user.get("QUEUES", DEFAULTS["QUEUES"])  # as given: conf.QUEUES adds TASKS'
    if not (
        isinstance(queues, list | tuple)
        and queues
        and all(isinstance(q, str) and q and len(q) <= 100 for q in queues)
    ):
        errors.append(
            checks.Error(
                f"WORKQUEUE['QUEUES'] must be a non-empty list of queue names, got {queues!r}.",
                id="django_workqueue.E002",
            )
        )
    elif conf.DEFAULT_QUEUE not in conf.QUEUES:
        errors.append(
            checks.Error(
                f"WORKQUEUE['DEFAULT_QUEUE'] {conf.DEFAULT_QUEUE!r} is not in WORKQUEUE['QUEUES'].",
                id="django_workqueue.E002",
            )
        )
    for name in _POSITIVE_NUMBERS:
        value = getattr(conf, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(
                checks.Error(
                    f"WORKQUEUE[{name!r}] must be a positive number, got {value!r}.",
                    id="django_workqueue.E002",
                )
            )
    for name in _POSITIVE_INTS:
        value = getattr(conf, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            errors.append(
                checks.Error(
                    f"WORKQUEUE[{name!r}] must be a positive integer, got {value!r}.",
                    id="django_workqueue.E002",
                )
            )
    token = conf.METRICS_TOKEN
    if token is not None and not (isinstance(token, str) and len(token) >= 16):
        got = "a shorter string" if isinstance(token, str) else type(token).__name__
        errors.append(
            checks.Error(
                "WORKQUEUE['METRICS_TOKEN'] must be None or a secret string of at least 16 "
                f"characters, got {got}.",
                hint="Make one: python -c 'import secrets; print(secrets.token_urlsafe())'",
                id="django_workqueue.E002",
            )
        )
    if not isinstance(conf.EAGER, bool):
        errors.append(
            checks.Error(
                f"WORKQUEUE['EAGER'] must be True or False, got {conf.EAGER!r}.",
                hint="EAGER runs jobs in the enqueueing process: for tests, never production.",
                id="django_workqueue.E002",
            )
        )
    if not isinstance(conf.PREPARED_STATEMENTS, bool):
        errors.append(
            checks.Error(
                f"WORKQUEUE['PREPARED_STATEMENTS'] must be True or False, "
                f"got {conf.PREPARED_STATEMENTS!r}.",
                hint="False when the jobs database goes through a pooler that cannot keep "
                "prepared statements (PgBouncer before 1.21, or without max_prepared_statements).",
                id="django_workqueue.E002",
            )
        )
    if not isinstance(conf.CLI_REQUIRE_USER, bool):
        errors.append(
            checks.Error(
                f"WORKQUEUE['CLI_REQUIRE_USER'] must be True or False, "
                f"got {conf.CLI_REQUIRE_USER!r}.",
                id="django_workqueue.E002",
            )
        )
    ahead = claim_ahead_problem(conf.CLAIM_AHEAD)
    if ahead:
        errors.append(
            checks.Error(
                f"WORKQUEUE['CLAIM_AHEAD'] {ahead}.",
                hint="Jobs a worker keeps claimed per slot beyond its free slots: 1 keeps one "
                "more job per slot ready to start; 0 turns it off.",
                id="django_workqueue.E002",
            )
        )
    standbys = conf.MAINTAINER_STANDBYS
    if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
        errors.append(
            checks.Error(
                f"WORKQUEUE['MAINTAINER_STANDBYS'] must be a whole number >= 0, got {standbys!r}.",
                hint="How many workers watch the maintainer, each on one more direct connection "
                "(PostgreSQL); 0 lets its lease alone tell its death. The default is 2.",
                id="django_workqueue.E002",
            )
        )
    jitter = conf.RETRY_JITTER
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        errors.append(
            checks.Error(
                f"WORKQUEUE['RETRY_JITTER'] must be a fraction from 0 to 1, "
                f"got {conf.RETRY_JITTER!r}.",
                id="django_workqueue.E002",
            )
        )
    grace = conf.SHUTDOWN_GRACE_SECONDS
    if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
        errors.append(
            checks.Error(
                "WORKQUEUE['SHUTDOWN_GRACE_SECONDS'] must be a number of seconds >= 0.",
                id="django_workqueue.E002",
            )
        )
    errors.extend(_backpressure_messages(conf.BACKPRESSURE))
    errors.extend(_middleware_messages(conf.MIDDLEWARE))
    errors += _claim_ttl_messages()
    errors += _retention_messages(conf.RETENTION)
    errors += _realtime_messages(conf.REALTIME)
    if not settings.USE_TZ:
        errors.append(
            checks.Error(
                "django-workqueue needs USE_TZ = True: leases and schedules are compared in UTC.",
                hint="Set USE_TZ = True in your settings.",
                id="django_workqueue.E005",
            )
        )
    return errors


def _backpressure_messages(value: object) -> list[checks.CheckMessage]:
    """WORKQUEUE["BACKPRESSURE"] must name a callable that can be imported (or be one)."""
    if value is None or (callable(value) and not isinstance(value, str)):
        return []
    hint = (
        "Give the dotted path of a function that takes a django_workqueue.flow.WorkerStats and "
        "returns seconds to wait, e.g. 'myproject.workers.backpressure' (see "
        "docs/guides/flow-control.md#backpressure)."
    )
    if not isinstance(value, str):
        problem = f"is {value!r}, not a dotted path"
    else:
        try:
            hook = import_string(value)
        except ImportError as exc:
            problem = f"{value!r} cannot be imported ({exc})"
        else:
            if callable(hook):
                return []
            problem = f"{value!r} is not callable"
    return [
        checks.Error(f"WORKQUEUE['BACKPRESSURE'] {problem}.", hint=hint, id="django_workqueue.E011")
    ]


def _middleware_messages(paths: object) -> list[checks.CheckMessage]:
    """WORKQUEUE["MIDDLEWARE"] must list dotted paths of callables that can be imported (and
    whose requirements, such as opentelemetry-api, are installed)."""
    hint = (
        "List dotted paths of attempt middleware factories, make(next_call) -> call(context), "
        "e.g. ['django_workqueue.middleware.logging_context'] (see "
        "docs/guides/observability.md#middleware)."
    )

    def error(problem: str) -> checks.CheckMessage:
        return checks.Error(f"WORKQUEUE['MIDDLEWARE'] {problem}.", hint=hint,
                            id="django_workqueue.E020")  # fmt: skip

    if not isinstance(paths, list | tuple):
        return [error(f"must be a list of dotted paths, got {paths!r}")]
    messages = []
    for path in paths:
        if not isinstance(path, str):
            messages.append(error(f"holds {path!r}, not a dotted path"))
            continue
        try:
            factory = import_string(path)
        except ImportError as exc:
            messages.append(error(f"names {path!r}, which cannot be imported ({exc})"))
            continue
        if not callable(factory):
            messages.append(error(f"names {path!r}, which is not callable"))
            continue
        requirement = getattr(factory, "requirement", None)
        missing = requirement() if callable(requirement) else None
        if missing:
            messages.append(error(f"names {path!r}, but {missing}"))
    return messages


def _claim_ttl_messages() -> list[checks.CheckMessage]:
    try:
        check_ttl("WORKQUEUE['CLAIM_TTL']", conf.CLAIM_TTL)
    except InvalidOption as exc:
        return [checks.Error(str(exc), id="django_workqueue.E002")]
    return []


def _retention_messages(value: object) -> list[checks.CheckMessage]:
    """WORKQUEUE["RETENTION"]: days (a number >= 0, or None for forever) per final status."""
    statuses = ("succeeded", "failed", "cancelled")
    hint = (
        'Give days per final status, None to keep forever, e.g. WORKQUEUE["RETENTION"] = '
        '{"succeeded": 7, "failed": 30, "cancelled": 7} (docs/guides/observability.md#retention).'
    )
    if not isinstance(value, dict):
        return [
            checks.Error(
                f"WORKQUEUE['RETENTION'] must be a dict of days per status, got {value!r}.",
                hint=hint, id="django_workqueue.E015",
            )
        ]  # fmt: skip
    problems = [
        f"WORKQUEUE['RETENTION'] has an unknown status {key!r}; the statuses are "
        f"{', '.join(statuses)}."
        for key in sorted(map(str, set(value) - set(statuses)))
    ]
    for status in statuses:
        days = value.get(status, 0)
        if days is not None and (
            isinstance(days, bool) or not isinstance(days, int | float) or days < 0
        ):
            problems.append(
                f"WORKQUEUE['RETENTION'][{status!r}] must be a number of days >= 0 or None "
                f"(keep forever), got {days!r}."
            )
    return [checks.Error(problem, hint=hint, id="django_workqueue.E015") for problem in problems]


def _realtime_messages(mode: object) -> list[checks.CheckMessage]:
    """WORKQUEUE["REALTIME"]: "database", "channel_layer" (Channels and a channel layer that
    crosses processes) or None."""
    hint = (
        'Use "database" (the default: websockets follow the database, no Redis), '
        '"channel_layer" (workers publish through CHANNEL_LAYERS, e.g. channels-redis) or None '
        "(see docs/guides/realtime.md)."
    )
    if mode not in ("database", "channel_layer", None):
        return [
            checks.Error(f"WORKQUEUE['REALTIME'] is {mode!r}.", hint=hint,
                         id="django_workqueue.E030")
        ]  # fmt: skip
    if mode != "channel_layer":
        return []
    if importlib.util.find_spec("channels") is None:
        return [
            checks.Error(
                "WORKQUEUE['REALTIME'] is 'channel_layer', but channels is not installed.",
                hint="pip install 'django-workqueue[realtime]', or set WORKQUEUE['REALTIME'] "
                "= 'database'.",
                id="django_workqueue.E031",
            )
        ]
    backend = (getattr(settings, "CHANNEL_LAYERS", None) or {}).get("default", {}).get("BACKEND")
    if not backend:
        return [
            checks.Error(
                "WORKQUEUE['REALTIME'] is 'channel_layer', but CHANNEL_LAYERS has no 'default' "
                "layer.",
                hint="Configure one, e.g. CHANNEL_LAYERS = {'default': {'BACKEND': "
                "'channels_redis.core.RedisChannelLayer', 'CONFIG': {'hosts': "
                "['redis://127.0.0.1:6379']}}}, or set WORKQUEUE['REALTIME'] = 'database'.",
                id="django_workqueue.E031",
            )
        ]
    if backend.endswith("InMemoryChannelLayer"):
        return [
            checks.Warning(
                "WORKQUEUE['REALTIME'] is 'channel_layer' with the InMemoryChannelLayer, which "
                "does not cross processes: websockets in the web process hear nothing from "
                "workers in other processes.",
                hint="Use channels_redis.core.RedisChannelLayer, or WORKQUEUE['REALTIME'] = "
                "'database'.",
                id="django_workqueue.W031",
            )
        ]
    return []


@checks.register()
def check_database_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return _database_messages()


def _database_messages() -> list[checks.CheckMessage]:
    alias = conf.DATABASE
    if alias not in settings.DATABASES:
        return [
            checks.Error(
                f"WORKQUEUE['DATABASE'] is {alias!r}, which is not in DATABASES.",
                hint=f"Use one of: {', '.join(settings.DATABASES)}.",
                id="django_workqueue.E001",
            )
        ]
    db = settings.DATABASES[alias]
    engine = db.get("ENGINE", "")
    driver = driver_class(engine)
    if driver is None:
        return [
            checks.Error(
                f"django-workqueue supports PostgreSQL and SQLite; database {alias!r} uses "
                f"{engine}.",
                hint="Point WORKQUEUE['DATABASE'] at a PostgreSQL or SQLite database.",
                id="django_workqueue.E001",
            )
        ]
    return driver.check_settings(alias, db)  # vendor knowledge stays in db/


@checks.register()
def check_runworker_owner(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    owner = get_commands().get("runworker")
    if owner not in (None, "django_workqueue"):
        return [
            checks.Error(
                f"The runworker command belongs to {owner!r}, not django_workqueue.",
                hint=f"List 'django_workqueue' before {owner!r} in INSTALLED_APPS.",
                id="django_workqueue.E004",
            )
        ]
    return []


@checks.register()
def check_task_imports(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Warning(
            f"Task module {module} failed to import ({error}); its tasks cannot run.",
            id="django_workqueue.W006",
        )
        for module, error in sorted(import_errors.items())
    ]


@checks.register()
def check_task_queues(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A task whose default queue does not exist would fail at every enqueue, inside a request."""
    queues = conf.QUEUES
    if not isinstance(queues, list | tuple) or conf.DEFAULT_QUEUE not in queues:
        return []  # check_settings reports that; every task would repeat it
    return [
        checks.Error(
            f"Task {name} has queue {spec.queue!r}, which is not in WORKQUEUE['QUEUES'].",
            hint=f"Add {spec.queue!r} to WORKQUEUE['QUEUES'], or give the task one of "
            f"{', '.join(map(repr, queues))} (@task(queue=...)).",
            id="django_workqueue.E007",
        )
        for name, spec in sorted((name, t.spec) for name, t in registered_tasks().items())
        if spec.queue not in queues
    ]


@checks.register()
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Error(problem, hint="See docs/guides/scheduling.md.", id="django_workqueue.E010")
        for problem in schedule_problems()
    ]
