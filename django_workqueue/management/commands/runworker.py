"""``manage.py runworker``: parse and validate the options, then run a ``Worker``."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from ...attempt.connections import is_transient
from ...cli.worker_queues import parsed_exclusions, queue_names, select_queues
from ...conf import workqueue_settings as conf
from ...db import driver_for
from ...discovery import import_urlconf
from ...models import Job
from ...registry import import_errors, registered_tasks
from ...worker import stop_signals
from ...worker.logs import configure_logging
from ...worker.processes import ChildLimits, require_settings_module
from ...worker.runner import Worker
from ...worker.shutdown import summary
from ...worker.slots import MAX_SLOTS

logger = logging.getLogger("django_workqueue.worker")
_MAX_START_BACKOFF = 5.0


def queue_list(value: str) -> list[tuple[str, int | None]]:
    """``a,b`` or ``a:8,b:2``: each queue with its slots (None when not given)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give at least one queue name, e.g. --queues default,mail")
    queues: list[tuple[str, int | None]] = []
    for item in items:
        name, colon, slots = (part.strip() for part in item.partition(":"))
        if not name:
            raise argparse.ArgumentTypeError(f"{item!r} has no queue name; write NAME:SLOTS")
        if any(name == seen for seen, _ in queues):
            raise argparse.ArgumentTypeError(f"queue {name!r} is given twice")
        queues.append((name, positive_int(slots) if colon else None))
    return queues


def slot_range(value: str) -> tuple[int, int | None]:
    """``N`` (N slots) or ``MIN-MAX`` (slots autoscale between MIN and MAX)."""
    floor_text, dash, ceiling_text = value.partition("-")
    floor = positive_int(floor_text.strip())
    if not dash:
        ceiling = None
    else:
        ceiling = positive_int(ceiling_text.strip())
        if ceiling < floor:
            raise argparse.ArgumentTypeError(
                f"{value}: the floor {floor} is above the ceiling {ceiling}; write MIN-MAX, "
                f"e.g. {ceiling}-{floor}"
            )
    if max(floor, ceiling or 0) > MAX_SLOTS:
        raise argparse.ArgumentTypeError(_too_many_slots(max(floor, ceiling or 0)))
    return floor, ceiling


def slot_options(queues: Any, concurrency: Any) -> dict[str, Any]:
    """The ``Worker`` arguments for ``--queues`` and ``--concurrency``, or a ``CommandError``
    for a combination that does not fit.

    Takes the parsed values, or the raw ones ``call_command("runworker", concurrency=4,
    queues=["default"])`` passes (argparse does not convert keyword options)."""
    try:
        queues = _parsed_queues(queues)
        if concurrency is not None and not isinstance(concurrency, tuple):
            concurrency = slot_range(str(concurrency))
    except argparse.ArgumentTypeError as exc:
        raise CommandError(str(exc)) from None
    budgets = {name: slots for name, slots in queues or [] if slots is not None}
    if not budgets:
        floor, ceiling = concurrency or (1, None)
        names = [name for name, _ in queues] if queues else None
        return {"queues": names, "concurrency": floor, "max_concurrency": ceiling}
    assert queues is not None
    missing = [name for name, slots in queues if slots is None]
    if missing:
        example = ",".join(f"{name}:{budgets.get(name, 1)}" for name, _ in queues)
        raise CommandError(
            f"--queues gives slots to some queues but not to {', '.join(missing)}: give every "
            f"queue its slots (e.g. --queues {example}), or none and --concurrency N for all"
        )
    if concurrency is not None:
        raise CommandError(
            "--concurrency cannot be combined with slots per queue (--queues "
            f"{','.join(f'{n}:{s}' for n, s in budgets.items())}): the worker runs their sum. "
            "Drop --concurrency, or drop the :SLOTS from --queues to share --concurrency slots"
        )
    if sum(budgets.values()) > MAX_SLOTS:
        raise CommandError(_too_many_slots(sum(budgets.values())))
    return {"queue_slots": budgets}


def _parsed_queues(queues: Any) -> list[tuple[str, int | None]] | None:
    if not queues:
        return None
    if isinstance(queues, str):
        return queue_list(queues)
    if all(isinstance(item, tuple) for item in queues):
        return list(queues)
    return queue_list(",".join(str(item) for item in queues))


def _too_many_slots(slots: int) -> str:
    return (
        f"{slots} slots is more than one worker may run ({MAX_SLOTS}); each slot holds a database "
        f"connection. Run more worker processes instead"
    )


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0 seconds")
    return number


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 seconds or more")
    return number


def worker_id(value: str) -> str:
    if not 0 < len(value) <= 64:
        raise argparse.ArgumentTypeError("a worker id is 1 to 64 characters")
    return value


class Command(BaseCommand):
    help = (
        "Run jobs: claims into N slots, renews leases, reaps crashed work. SIGTERM or Ctrl-C "
        "drains gracefully (running jobs get WORKQUEUE['SHUTDOWN_GRACE_SECONDS'] to finish, "
        "the rest go back to ready uncharged); a second signal exits at once."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queues", type=queue_list, help="Comma-separated queues to serve "
                            "(default, or '*': every queue of WORKQUEUE['QUEUES'] and of the "
                            "TASKS aliases on django-workqueue); NAME:SLOTS gives each queue "
                            "its own slots, e.g. default:8,mail:2.")  # fmt: skip
        parser.add_argument("--exclude-queues", type=queue_names, metavar="QUEUES",
                            help="Comma-separated queues not to serve, of every queue (or of "
                            "--backend's).")  # fmt: skip
        parser.add_argument("--backend", metavar="ALIAS",
                            help="Serve the QUEUES of this TASKS alias (its BACKEND must be "
                            "django_workqueue.backend.WorkqueueBackend).")  # fmt: skip
        parser.add_argument("--concurrency", type=slot_range,
                            help="Jobs run at once (slot threads), default 1; MIN-MAX autoscales "
                            "between MIN and MAX, e.g. 2-32.")  # fmt: skip
        parser.add_argument("--burst", action="store_true",
                            help="Exit once no job is ready and none is running.")  # fmt: skip
        parser.add_argument("--wait-scheduled", type=non_negative_float, metavar="SECONDS",
                            help="With --burst: before exiting, also wait for jobs scheduled "
                            "to run within SECONDS (a retry's backoff, a snooze) and run "
                            "them.")  # fmt: skip
        parser.add_argument("--max-jobs", type=positive_int,
                            help="Exit after running this many jobs.")  # fmt: skip
        parser.add_argument("--poll-interval", type=positive_float,
                            help="Seconds between polls when idle "
                            "(default WORKQUEUE['POLL_INTERVAL']).")  # fmt: skip
        parser.add_argument("--worker-id", type=worker_id,
                            help="Lease owner id (default: a fresh uuid4 per start; a reused "
                            "id hides a crashed process).")  # fmt: skip
        parser.add_argument("--pool", choices=("threads", "processes"), default="threads",
                            help="Run jobs in slot threads (the default, for I/O-bound work) "
                            "or one child process per slot (CPU-bound work, hard "
                            "limits).")  # fmt: skip
        parser.add_argument("--hard-timeout", type=positive_float,
                            help="With --pool processes: kill a job's process after this many "
                            "seconds, for tasks without their own hard_timeout.")  # fmt: skip
        parser.add_argument("--max-jobs-per-child", type=positive_int,
                            help="With --pool processes: replace a child process after it ran "
                            "this many jobs.")  # fmt: skip
        parser.add_argument("--max-memory-per-child", type=positive_int, metavar="MB",
                            help="With --pool processes: replace a child process whose resident "
                            "memory passed this many MiB after a job.")  # fmt: skip
        parser.add_argument("--metrics-port", type=positive_int,
                            help="Serve this process's own Prometheus metrics on this port "
                            "(needs the 'prometheus' extra).")  # fmt: skip
        parser.add_argument("--metrics-address", default="127.0.0.1",
                            help="The address --metrics-port listens on (default 127.0.0.1, "
                            "this host only; the page has no authentication: 0.0.0.0 shows "
                            "the counters to every network that reaches the host).")  # fmt: skip

    def check(self, *args: Any, **kwargs: Any) -> Any:
        # Django 6.1 runs the model checks against every database when none is named (a
        # JSONField asks the database whether it supports JSON), which connects: a database
        # that cannot be opened would end runworker with a traceback before _require_tables
        # can name the problem, or wait for a database that is restarting. Run them as Django
        # 6.0 did, without databases.
        kwargs.setdefault("databases", [])
        return super().check(*args, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("wait_scheduled") is not None and not options["burst"]:
            raise CommandError(
                "--wait-scheduled only changes when a --burst worker exits; add --burst "
                "(a worker without it never exits on its own)"
            )
        try:
            requested = _parsed_queues(options["queues"])
        except argparse.ArgumentTypeError as exc:
            raise CommandError(str(exc)) from None
        selected = select_queues(
            requested, parsed_exclusions(options.get("exclude_queues")), options.get("backend")
        )
        slots = slot_options(selected, options["concurrency"])
        queues = list(slots.get("queue_slots") or slots["queues"] or conf.QUEUES)
        import_urlconf()  # the tasks the views' modules define (docs/guides/django-tasks.md)
        tasks = registered_tasks()
        if not tasks:
            raise CommandError(_nothing_to_run())
        pool = pool_options(options, queues)
        configure_logging(options["verbosity"])
        if options["verbosity"] >= 2:
            logger.info("%d registered task(s):", len(tasks))
            for name, registered in sorted(tasks.items()):
                logger.info("  %s (queue %s)", name, registered.spec.queue)
        # Installed when the app was ready (a SIGTERM during the imports, Django's checks or
        # the wait for the database is a clean exit, not a death by the signal), or now.
        signals = stop_signals.for_command()
        try:
            _require_tables()
            if options["metrics_port"]:
                _serve_metrics(options["metrics_port"], options["metrics_address"])
            signals.drain_from_now()
            worker = Worker(
                **slots,
                burst=options["burst"],
                wait_scheduled=options["wait_scheduled"],
                max_jobs=options["max_jobs"],
                poll_interval=options["poll_interval"],
                worker_id=options["worker_id"],
                **pool,
            )
            signals.attach(worker)
            worker.run()  # it logs its start line ("worker <id> started: ...") once registered
            if worker.processes is not None and worker.processes.failed is not None:
                raise CommandError(f"--pool processes: {worker.processes.failed}")
            if worker.misconfigured is not None:
                raise CommandError(worker.misconfigured)
            done = summary(worker.finished_count, worker.completer.endings)
            self.stdout.write(f"runworker {worker.id}: stopped after {done}")
        finally:  # called in-process (call_command, tests): leave signals as they were
            signals.restore()


def pool_options(options: dict[str, Any], queues: list[str]) -> dict[str, Any]:
    """The ``Worker`` arguments for ``--pool`` and the child limits, or a ``CommandError`` for
    a combination that cannot work."""
    pool = options.get("pool") or "threads"
    limits = {
        "--hard-timeout": options.get("hard_timeout"),
        "--max-jobs-per-child": options.get("max_jobs_per_child"),
        "--max-memory-per-child": options.get("max_memory_per_child"),
    }
    if pool == "threads":
        given = [flag for flag, value in limits.items() if value is not None]
        if given:
            raise CommandError(
                f"{', '.join(given)} need child processes (threads cannot be killed or "
                f"replaced): add --pool processes, or leave {'them' if len(given) > 1 else 'it'} "
                f"out"
            )
        hard = sorted(
            name for name, registered in registered_tasks().items()
            if registered.spec.hard_timeout is not None and registered.spec.queue in queues
        )  # fmt: skip
        if hard:
            raise CommandError(
                f"task(s) {', '.join(hard)} declare hard_timeout, which only a process pool can "
                f"enforce (threads cannot be killed): run their queue with --pool processes, or "
                f"leave it out of this worker's --queues"
            )
        return {}
    try:
        require_settings_module()
    except ImproperlyConfigured as exc:
        raise CommandError(f"--pool processes: {exc}") from None
    default = limits["--hard-timeout"]
    shadowed = sorted(
        f"{name} ({registered.spec.timeout}s)" for name, registered in registered_tasks().items()
        if default is not None and registered.spec.queue in queues
        and registered.spec.hard_timeout is None and registered.spec.timeout is not None
        and registered.spec.timeout >= default
    )  # fmt: skip
    if shadowed:
        raise CommandError(
            f"--hard-timeout {default} is not longer than the timeout of {', '.join(shadowed)}: "
            f"the hard limit would kill them before their own timeout could stop them; raise "
            f"--hard-timeout, or give those tasks a hard_timeout of their own"
        )
    memory = limits["--max-memory-per-child"]
    return {
        "pool": "processes",
        "child_limits": ChildLimits(
            max_jobs=limits["--max-jobs-per-child"],
            max_memory_bytes=memory * 2**20 if memory is not None else None,
            hard_timeout=limits["--hard-timeout"],
            verbosity=int(options.get("verbosity", 1)),
        ),
    }


def _serve_metrics(port: int, address: str) -> None:
    try:  # imported here: prometheus-client is an optional extra, needed by --metrics-port only
        from ...metrics import serve_worker_metrics
    except ImportError as exc:
        raise CommandError(f"--metrics-port: {exc}") from None
    try:
        serve_worker_metrics(port, address)
    except OSError as exc:
        raise CommandError(
            f"--metrics-port {port} --metrics-address {address}: cannot listen ({exc}); pick a "
            f"free port and an address of this host"
        ) from None
    logger.info("serving this worker's metrics on %s port %d", address, port)


def _nothing_to_run() -> str:
    """Why a worker without a single registered task refuses to start (every job it claimed
    would fail with TaskNotRegistered), and the fix."""
    failed = import_errors
    if failed:
        modules = "; ".join(f"{name} ({error})" for name, error in sorted(failed.items()))
        return (
            f"no task is registered: every task module failed to import: {modules}. Fix the "
            f"import error and start the worker again"
        )
    return (
        "no task is registered: no module imported at start-up (the tasks.py of each app in "
        "INSTALLED_APPS, and WORKQUEUE['TASK_MODULES']) defines a @task. Put your tasks in a "
        "tasks.py of an installed app, or list the modules that define them in "
        "WORKQUEUE['TASK_MODULES']"
    )


def _require_tables() -> None:
    """Stop if the job tables are missing; wait while the database cannot be reached.

    A worker (re)started while the database restarts or refuses connections must not exit: its
    supervisor would restart it in a loop (and systemd gives up after a few quick failures),
    so it waits with the control loop's backoff instead. Errors no wait can cure (a rejected
    password, a database that does not exist) stop it at once. A signal ends the wait (and the
    process, with status 0: ``StopSignals``).
    """
    alias = conf.DATABASE
    backoff = 0.1
    while True:
        try:
            tables = connections[alias].introspection.table_names()
            break
        except Exception as exc:
            if not is_transient(exc):
                raise
            problem = driver_for(alias).incurable_connection_error(exc)
            if problem is not None:
                raise CommandError(f"cannot use database {alias!r}: {problem}") from exc
            connections[alias].close()
            logger.warning(
                "database %r cannot be reached (%s: %s); retrying in %.1fs",
                alias, type(exc).__name__, exc, backoff,
            )  # fmt: skip
            time.sleep(backoff)
            backoff = min(backoff * 2, _MAX_START_BACKOFF)
    if Job._meta.db_table not in tables:
        raise CommandError(
            f"the job tables do not exist in database {alias!r}; run "
            f"'manage.py migrate django_workqueue --database {alias}' first"
        )
