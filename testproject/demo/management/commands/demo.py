"""``manage.py demo``: enqueue a realistic mix of jobs and a workflow, run them with
``runworker --burst``, report.

The demo works on the project's own database (``WORKQUEUE["DATABASE"]``; SQLite by default). It
deletes the jobs and workflows of an earlier demo run first, so every run starts from the same
state. The workflow (a fan-out, a fan-in and an approval) is in ``testproject/demo/launch.py``.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections import Counter, defaultdict
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.db import connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from django_workqueue.conf import workqueue_settings as conf
from django_workqueue.management.commands.runworker import positive_int
from django_workqueue.models import Job, Workflow
from django_workqueue.operations import cancel_job
from testproject.demo import launch, tasks

PREFIX = f"{tasks.__name__}."
LOG_LINE_WIDTH = 160
# How many jobs a full run ends with (49 enqueued; the workflow adds 3 mails while it runs).
# The README and the help say it; tests/integration/test_demo.py checks all three agree.
FULL_RUN_JOBS = 52
STATUSES = ("blocked", "scheduled", "ready", "running", "succeeded", "failed", "cancelled")


def demo_jobs(alias: str) -> QuerySet[Job]:
    """The jobs of the demo's tasks (other jobs in the database are left alone)."""
    return Job.objects.using(alias).filter(task_name__startswith=PREFIX)


def short(task_name: str) -> str:
    return task_name.removeprefix(PREFIX)


def clip(line: str, width: int) -> str:
    """``line`` in at most ``width`` characters, cut at a word's end with "…" when too long."""
    if len(line) <= width:
        return line
    cut = line[: width - 1]
    space = cut.rfind(" ")
    if space > width // 2:  # a word's end not too far back; else cut the long word itself
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


class _RolledBack(Exception):
    pass


class Printer:
    """Event lines, and a status line rewritten in place on a terminal (else printed on change)."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self.tty = out.isatty()
        # A status line wider than the terminal wraps, and "\r" cannot rewrite it any more.
        self.width = shutil.get_terminal_size().columns - 1
        self.lock = threading.Lock()
        self.status = ""
        self.last_printed = ""

    def event(self, line: str) -> None:
        with self.lock:
            if self.tty and self.status:
                self.out.write(f"\r{line.ljust(len(self.status))}")
                self.out.write(f"\r{self.status}", ending="")
            else:
                self.out.write(line)
            self.out.flush()

    def update(self, line: str, key: str) -> None:
        with self.lock:
            if self.tty:
                line = clip(line, self.width)
                self.out.write(f"\r{line.ljust(len(self.status))}", ending="")
            elif key != self.last_printed:
                self.out.write(line)
            self.status, self.last_printed = line, key
            self.out.flush()

    def end_status(self) -> None:
        with self.lock:
            if self.tty and self.status:
                self.out.write("")
            self.status = ""


class WorkerLog(logging.Handler):
    """The worker logs every failed attempt (WARNING while it will retry, ERROR once the job is
    dead-lettered) with its traceback, for log handlers and error trackers; the demo shows each
    record as one line and keeps the tracebacks off the screen."""

    def __init__(self, printer: Printer) -> None:
        super().__init__(logging.WARNING)
        self.printer = printer

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().split("\n", 1)[0]
        self.printer.event(clip(f"  log {record.levelname:<7} {message}", LOG_LINE_WIDTH))


class Monitor(threading.Thread):
    """Prints job counts by status twice a second; cancels the export once it is under way."""

    def __init__(self, alias: str, printer: Printer, export_id: int, started: float) -> None:
        super().__init__(name="demo-monitor", daemon=True)
        self.alias, self.printer, self.export_id, self.started = alias, printer, export_id, started
        self.stopping = threading.Event()
        self.cancel_sent = False

    def run(self) -> None:
        try:
            while not self.stopping.wait(0.5):
                self.safe_tick()
            self.safe_tick()
        finally:
            connections.close_all()  # this thread's own connection

    def safe_tick(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # a status line is not worth ending the demo for
            self.printer.event(f"  (status line skipped: {type(exc).__name__}: {exc})")

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)

    def tick(self) -> None:
        jobs = demo_jobs(self.alias)
        counts = Counter(dict(jobs.values_list("status").annotate(n=Count("id")).order_by()))
        running = list(
            jobs.filter(status="running")
            .order_by("id")
            .values_list(
                "id", "task_name", "progress_current", "progress_total", "progress_message"
            )
        )
        parts = []
        for status in STATUSES:
            parts.append(f"{status} {counts[status]}")
        shown = [
            f"{short(name)} #{pk} {current}/{total}"
            for pk, name, current, total, _ in running
            if current is not None
        ][:2]
        key = ", ".join(parts)
        line = f"  {time.monotonic() - self.started:5.1f}s  {key}"
        if shown:
            line += "  | " + ", ".join(shown)
        self.printer.update(line, key)
        self.maybe_cancel_export(running)

    def maybe_cancel_export(self, running: list[tuple[Any, ...]]) -> None:
        # What a user pressing "cancel" would do, once the export has made some progress.
        for pk, _, current, total, _ in running:
            if pk == self.export_id and (current or 0) >= 3 and not self.cancel_sent:
                self.cancel_sent = True
                result = cancel_job(pk, alias=self.alias)
                self.printer.event(
                    f"  >> cancel_job(#{pk}) at export part {current}/{total} -> {result.action}; "
                    f"seen at the next heartbeat"
                )


class Command(BaseCommand):
    help = (
        f"Enqueue {FULL_RUN_JOBS} demo jobs (retries, a delayed report, a dead letter, a "
        "cancellation, an async task, and a workflow with a fan-out, a fan-in and an approval) "
        "and run them with runworker --burst until every job has finished."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--quick", action="store_true",
                            help="A smaller mix (25 jobs), for tests.")  # fmt: skip
        parser.add_argument("--concurrency", type=positive_int, default=4,
                            help="Slots of the demo's worker. Default 4.")  # fmt: skip
        parser.add_argument("--timeout", type=float, default=120.0,
                            help="Give up after this many seconds. Default 120.")  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.DATABASE
        self.quick = options["quick"]
        self.printer = Printer(self.stdout)
        self._migrate(alias)
        db = connections[alias]
        where = db.settings_dict["NAME"]
        self.stdout.write(f"django-workqueue demo on {db.vendor} ({where})")
        removed = demo_jobs(alias).count()
        # Deleting a workflow deletes its jobs and their edges.
        Workflow.objects.using(alias).filter(pk__in=demo_jobs(alias).values("workflow_id")).delete()
        demo_jobs(alias).delete()
        if removed:
            self.stdout.write(f"Removed {removed} job(s) left by an earlier demo run.")

        self.stdout.write("\nEnqueueing:")
        export_id = self._enqueue(alias)
        self.workflow = launch.enqueue(alias, self.quick)
        mails = len(launch.subscribers(self.quick))
        self.stdout.write(
            f"  {self.workflow.total:2d} x workflow {self.workflow.name!r}: fan-out, fan-in (a "
            f"chord), an approval 2 h ahead; adds {mails} mails at run time"
        )
        total = demo_jobs(alias).count()
        self.stdout.write(f"  = {total} jobs\n")

        self.stdout.write(
            f"Running: manage.py runworker --burst --concurrency {options['concurrency']}, "
            f"in rounds until every job has finished"
        )
        started = time.monotonic()
        monitor = Monitor(alias, self.printer, export_id, started)
        worker_log = logging.getLogger("django_workqueue.worker")
        handler, propagate = WorkerLog(self.printer), worker_log.propagate
        worker_log.addHandler(handler)
        worker_log.propagate = False
        monitor.start()
        try:
            self._run_rounds(alias, options["concurrency"], started + options["timeout"])
        except KeyboardInterrupt:
            raise CommandError("interrupted; the demo's jobs are left as they are") from None
        finally:
            monitor.stop()
            worker_log.removeHandler(handler)
            worker_log.propagate = propagate
            self.printer.end_status()
        elapsed = time.monotonic() - started
        self._summary(alias, elapsed, options["concurrency"])

    # --- set-up -------------------------------------------------------------------------------

    def _migrate(self, alias: str) -> None:
        executor = MigrationExecutor(connections[alias])
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            self.stdout.write("Applying migrations ...")
            call_command("migrate", database=alias, interactive=False, verbosity=0)

    def _line(self, count: int, task: Any, note: str) -> None:
        self.stdout.write(f"  {count:2d} x {short(task.name):<21} {task.spec.queue:<8} {note}")

    def _enqueue(self, alias: str) -> int:
        quick = self.quick
        receipts = 3 if quick else 12
        with transaction.atomic(using=alias):  # e.g. a view that saves orders
            for i in range(receipts):
                order = 1001 + i
                tasks.send_receipt.enqueue(
                    order_id=order, email=f"customer{order}@example.com", flaky=i % 4 == 1
                )
        flaky = len(range(1, receipts, 4))
        self._line(receipts, tasks.send_receipt,
                   f"in one transaction.atomic(); {flaky} fail once and retry")  # fmt: skip

        try:
            with transaction.atomic(using=alias):
                tasks.send_receipt.enqueue(order_id=9999, email="declined@example.com")
                raise _RolledBack  # the payment was declined: the order and its receipt go
        except _RolledBack:
            pass
        stored = demo_jobs(alias).filter(kwargs__order_id=9999).count()
        self._line(1, tasks.send_receipt,
                   f"in a transaction that rolled back: rows stored = {stored}")  # fmt: skip

        images = 2 if quick else 8
        tasks.resize_image.enqueue_many(
            [((500 + n, [1600, 800, 400, 200]), {}) for n in range(images)]
        )
        self._line(images, tasks.resize_image, "one INSERT (enqueue_many); reports progress")

        delay = 2 if quick else 4
        daily = tasks.build_report.using(delay=delay, unique_key="report:daily-sales")
        first, second = daily.enqueue("daily-sales"), daily.enqueue("daily-sales")
        same = "the same job" if second.pk == first.pk else "two jobs (!)"
        self._line(1, tasks.build_report,
                   f"delay={delay}s; enqueued twice with one unique_key -> {same}")  # fmt: skip
        quarterly = tasks.build_report.using(delay=60).enqueue("quarterly")
        result = cancel_job(quarterly, alias=alias)
        self._line(1, tasks.build_report, f"delay=60s, then cancel_job(): {result.action}")

        export = tasks.export_archive.enqueue(parts=60 if quick else 150)
        self._line(1, tasks.export_archive, "long-running; the demo cancels it while it runs")

        failures = [1, 2] if quick else [0, 1, 2, 1, 2, 0]
        for n, count in enumerate(failures):
            tasks.call_upstream.enqueue(f"req-{n + 1}", failures=count)
        self._line(len(failures), tasks.call_upstream,
                   "partner API answers 503 up to twice; retries with backoff")  # fmt: skip

        tasks.sync_contact.enqueue(4711)
        self._line(1, tasks.sync_contact, "raises Discard -> dead-letter queue at once")
        tasks.import_legacy_feed.enqueue("feeds/legacy.xml")
        self._line(1, tasks.import_legacy_feed, "fails every time -> failed after 3 attempts")
        tasks.wait_for_upload.enqueue("upload-77", delay=0.3 if quick else 0.5)
        self._line(1, tasks.wait_for_upload, "raises Snooze once; a snooze spends no attempt")

        currencies = ["USD"] if quick else ["USD", "GBP", "JPY", "CHF"]
        for currency in currencies:
            tasks.fetch_exchange_rates.enqueue(currency)
        self._line(len(currencies), tasks.fetch_exchange_rates,
                   "async def: runs on the worker's event loop")  # fmt: skip
        ages = [7] if quick else [1, 7, 30, 90]
        tasks.purge_temp_files.enqueue_many([((days,), {}) for days in ages])
        self._line(len(ages), tasks.purge_temp_files,
                   "priority -10: claimed after every ready job above it")  # fmt: skip
        return export.pk

    # --- running ------------------------------------------------------------------------------

    def _run_rounds(self, alias: str, concurrency: int, give_up_at: float) -> None:
        jobs = demo_jobs(alias)
        for round_number in range(1, 1000):
            attempts_before = jobs.aggregate(n=Sum("attempt"))["n"] or 0
            round_started = time.monotonic()
            self._runworker(concurrency)
            attempts = (jobs.aggregate(n=Sum("attempt"))["n"] or 0) - attempts_before
            unfinished = jobs.active()
            left = unfinished.count()
            self.printer.event(
                f"  round {round_number}: runworker --burst ran {attempts} attempt(s) in "
                f"{time.monotonic() - round_started:.1f}s; {left} job(s) not finished"
            )
            if not left:
                return
            launch.approve_when_ready(alias, self.workflow, self.printer.event)
            if time.monotonic() > give_up_at:
                raise CommandError(f"{left} demo job(s) still unfinished; giving up")
            due = unfinished.filter(status__in=["scheduled", "ready"]).order_by("run_after")
            next_at = due.values_list("run_after", flat=True).first()
            wait = 0.2 if next_at is None else (next_at - timezone.now()).total_seconds()
            wait = min(max(wait, 0.0), 5.0)
            self.printer.event(
                f"  (--burst exits when no job is ready now; the next is due in {wait:.1f}s: "
                f"wait, then round {round_number + 1})"
            )
            time.sleep(wait)

    def _runworker(self, concurrency: int) -> None:
        # runworker installs SIGINT/SIGTERM handlers for its graceful drain; put ours back after.
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            call_command(
                "runworker", burst=True, concurrency=concurrency, verbosity=0, stdout=StringIO()
            )
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    # --- report -------------------------------------------------------------------------------

    def _summary(self, alias: str, elapsed: float, concurrency: int) -> None:
        rows = list(demo_jobs(alias).order_by("id"))
        by_task: dict[str, Counter[str]] = defaultdict(Counter)
        for job in rows:
            counts = by_task[short(job.task_name)]
            counts["jobs"] += 1
            counts[job.status] += 1
            counts["attempts"] += job.attempt
        columns = ("jobs", "succeeded", "failed", "cancelled", "attempts")
        write = self.stdout.write
        write("\nSummary")
        write(f"  {'task':<22}" + "".join(f"{c:>11}" for c in columns))
        totals: Counter[str] = Counter()
        for name in sorted(by_task):
            totals.update(by_task[name])
            write(f"  {name:<22}" + "".join(f"{by_task[name][c]:>11}" for c in columns))
        write(f"  {'total':<22}" + "".join(f"{totals[c]:>11}" for c in columns))

        write("\nSucceeded after more than one attempt:")
        for job in rows:
            if job.status == "succeeded" and job.attempt > 1:
                write(f"  #{job.pk:<4} {short(job.task_name):<16} {self._history(job)}")

        dead = [job for job in rows if job.status == "failed"]
        write(f"\nDead-letter queue: {len(dead)} failed job(s); "
              f"operations.redrive() would move them back to ready")  # fmt: skip
        for job in dead:
            write(f"  #{job.pk:<4} {short(job.task_name):<18} attempt {job.attempt}/"
                  f"{job.max_attempts}, {_last_error(job)}")  # fmt: skip

        write("\nCancelled:")
        for job in rows:
            if job.status == "cancelled":
                when = (
                    "before it ever ran (0 attempts)"
                    if job.attempt == 0
                    else f"while running, at {job.progress_message or 'step'} of "
                    f"{job.progress_total} (its attempt {job.attempt})"
                )
                write(f"  #{job.pk:<4} {short(job.task_name):<18} {when}")

        launch.report(alias, self.workflow, write)

        unfinished = sum(1 for job in rows if not job.is_finished)
        finished = len(rows) - unfinished
        write(
            f"\n{finished} of {len(rows)} jobs finished in {elapsed:.1f}s: "
            f"{finished / elapsed:.1f} jobs/s on {concurrency} slots\n"
            f"(most of that time is spent waiting for retry back-off and the delayed report)."
        )
        if unfinished:
            raise CommandError(f"{unfinished} demo job(s) did not finish")

    def _history(self, job: Job) -> str:
        failed = len(job.errors)
        snoozed = job.attempt - 1 - failed
        if snoozed > 0:
            return (
                f"attempt {job.attempt}: snoozed {snoozed}x, which spent no attempt "
                f"(max_attempts {job.max_attempts - snoozed} -> {job.max_attempts})"
            )
        return f"attempt {job.attempt}, after {_last_error(job)}"


def _last_error(job: Job) -> str:
    error = job.errors[-1] if job.errors else {}
    kind = str(error.get("type", "?")).rsplit(".", 1)[-1]
    return f"{kind}: {error.get('message', '')}"
