"""``manage.py workqueue``: the operator's command. It parses and validates the arguments, then
calls library code: ``django_workqueue.cli`` reads and renders, ``django_workqueue.operations``
changes jobs and queues. Every change (not a dry run) writes an audit record (source "cli",
the OS user, or the Django user named by --user, whose permissions are then checked, and the
OS user who named it). See docs/reference/cli.md.

Exit status: 0 done; 1 a mutation (or its dry run) found nothing it could change, or the
operator did not confirm it; 2 an error (bad arguments, an unknown job id or queue, a change
that needs a confirmation, without --yes, and no terminal to ask it on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ... import audit, operations
from ...cli import actions, explanation, reports, tables, tasks_db_import
from ...cli.authority import Authority, NotAllowed
from ...cli.confirmation import confirm
from ...cli.selection import (
    Filters,
    add_filter_arguments,
    duration,
    filters_from,
    job_id,
    status,
)
from ...conf import workqueue_settings as conf
from ...disclosure import ErrorTextHidden
from ...exceptions import EnqueueError, UnknownQueue
from ...models import AuditSource, Job
from ...operations.purge import purgeable
from ...registry import MAX_ATTEMPTS

NOTHING_CHANGED = 1
ERROR = 2

_JOB_ACTIONS = {
    "cancel": "Cancel jobs: waiting ones end cancelled, running ones are asked to stop.",
    "retry": "Run failed or scheduled jobs again now (a failed one gets a fresh attempt budget).",
    "redrive": "Move failed jobs (the dead-letter queue) back to ready.",
    "hold": "Keep waiting jobs (blocked, scheduled, ready) from running until released.",
    "release": "Let held jobs run again.",
}


def json_value(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not JSON ({exc})") from None


def positive_int(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_ATTEMPTS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a whole number from 1 to {MAX_ATTEMPTS}"
        )
    return int(value)


class Command(BaseCommand):
    help = (
        "Inspect and operate the job queue: status, jobs, show, explain, cancel, retry, redrive, "
        "hold, release, signal, pause, resume, purge, workers, import-django-tasks-db."
    )
    requires_system_checks: list[str] = []  # an operator's tool must work on a broken config

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--user", metavar="NAME",
            help="Act for this Django user: its workqueue permissions are checked (no password "
            "is asked) and the audit trail names it with the OS user (required when "
            "WORKQUEUE['CLI_REQUIRE_USER'] is on).",
        )  # fmt: skip
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def sub(
            name: str, help: str, *, dry_run: bool = False, confirms: bool = False
        ) -> argparse.ArgumentParser:
            child = commands.add_parser(name, help=help, description=help)
            child.add_argument("--json", action="store_true", help="Print JSON for scripts.")
            if dry_run:
                child.add_argument(
                    "--dry-run", action="store_true", help="Show what would change; change nothing."
                )
            if confirms:
                child.add_argument(
                    "--yes", "--noinput", "--no-input", action="store_true", dest="yes",
                    help="Do not ask for confirmation (needed without a terminal).",
                )  # fmt: skip
            return child

        def wide(child: argparse.ArgumentParser) -> argparse.ArgumentParser:
            child.add_argument(
                "--wide", action="store_true",
                help="Every column, whole, however wide the terminal (by default a table fits "
                "it: long text is cut, then the least needed columns drop).",
            )  # fmt: skip
            return child

        wide(sub("status", "Jobs by queue and status, paused queues, live workers."))
        jobs = wide(sub("jobs", "List jobs, newest first."))
        add_filter_arguments(jobs)
        jobs.add_argument("--limit", type=positive_int, default=50, help="At most N (50).")
        show = sub("show", "Everything about one job.")
        show.add_argument("id", type=job_id)
        show.add_argument("--tracebacks", action="store_true", help="Show errors' tracebacks.")
        explain = sub("explain", "Why a job is not running (or where it runs, how it ended).")
        explain.add_argument("id", type=job_id)
        for name, help in _JOB_ACTIONS.items():
            child = sub(name, help, dry_run=True, confirms=True)
            child.add_argument("ids", nargs="*", type=job_id, metavar="ID")
            add_filter_arguments(child)
            child.add_argument(
                "--all", action="store_true", help="Every job it applies to (no ID, no filter)."
            )
            if name == "redrive":
                child.add_argument(
                    "--attempts", type=positive_int, help="Fresh attempts (default: the task's)."
                )
        for name, help in (("pause", "Stop claims from queues."), ("resume", "Resume queues.")):
            sub(name, help, dry_run=True).add_argument("queues", nargs="+", metavar="QUEUE")
        purge = sub(
            "purge", "Delete finished jobs past WORKQUEUE['RETENTION'] now.", dry_run=True,
            confirms=True,
        )  # fmt: skip
        purge.add_argument(
            "ids", nargs="*", type=job_id, metavar="ID",
            help="Instead of retention: delete these finished jobs (outside workflows, with no "
            "dependents; the others are kept).",
        )  # fmt: skip
        purge.add_argument(
            "--older-than", type=duration, metavar="AGE",
            help="Instead of the retention settings: finished more than AGE ago (7d, 12h).",
        )  # fmt: skip
        purge.add_argument(
            "--status", action="append", default=[], type=status, metavar="STATUS",
            help="Only jobs that ended so (succeeded, failed, cancelled; repeat).",
        )  # fmt: skip
        signal = sub("signal", "Send a signal to a job: a context.wait_for_signal(NAME) takes it.")
        signal.add_argument("id", type=job_id)
        signal.add_argument("name", metavar="NAME", help="The signal's name (approve).")
        signal.add_argument(
            "--payload", type=json_value, default=None, metavar="JSON",
            help='Its payload, a JSON value (\'{"by": "alice"}\'); default null.',
        )  # fmt: skip
        wide(sub("workers", "The live workers."))
        moving = sub(
            "import-django-tasks-db", "Move django-tasks-db's queued rows (DBTaskResult, READY) "
            "into jobs, each row once (docs/guides/migrating.md).", dry_run=True,
        )  # fmt: skip
        moving.add_argument(
            "--include-running", action="store_true",
            help="Also move RUNNING rows. django-tasks-db records no worker liveness: give it "
            "only once every db_worker is stopped (the rows then start again).",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.DATABASE
        subcommand = options["subcommand"]
        self.json = options["json"]
        # The width the tables fit; None: --wide, every column whole.
        self.width = None if options.get("wide") else tables.terminal_width(self.stdout)
        try:
            self.authority = Authority(options.get("user"))
            self.authority.require(subcommand, tracebacks=bool(options.get("tracebacks")))
        except NotAllowed as exc:
            raise CommandError(str(exc), returncode=ERROR) from exc
        if subcommand == "status":
            return self._show(reports.status(alias), lambda data: tables.status(data, self.width))
        if subcommand == "workers":
            return self._show(reports.workers(alias), lambda data: tables.workers(data, self.width))
        if subcommand == "jobs":
            selection = self._filters(options).apply(Job.objects.using(alias))
            rows = reports.job_rows(selection, options["limit"], self.authority.clearance)
            return self._show(rows, lambda data: tables.jobs(data, options["limit"], self.width))
        if subcommand == "show":
            job = Job.objects.using(alias).filter(pk=options["id"]).first()
            if job is None:
                raise CommandError(f"there is no job {options['id']}", returncode=ERROR)
            detail = reports.job_detail(
                job, self.authority.clearance, tracebacks=options["tracebacks"]
            )
            return self._show(detail, tables.job)
        if subcommand == "explain":
            return self._explain(alias, options["id"])
        if subcommand in ("pause", "resume"):
            try:
                report = actions.on_queues(
                    subcommand, options["queues"], alias, dry_run=options["dry_run"]
                )
            except UnknownQueue as exc:
                raise CommandError(str(exc), returncode=ERROR) from exc
            if not report.dry_run:
                queues = list(dict.fromkeys(options["queues"]))
                self._audit(alias, subcommand, {"queues": queues}, report.changed)
            return self._report(report)
        if subcommand == "signal":
            return self._signal(alias, options)
        if subcommand == "import-django-tasks-db":
            return self._import_tasks_db(alias, options)
        if subcommand == "purge":
            return self._purge(alias, options)
        return self._job_action(alias, subcommand, options)

    def _job_action(self, alias: str, name: str, options: dict[str, Any]) -> None:
        action = actions.actions(attempts=options.get("attempts"))[name]
        filters = self._filters(options)
        ids, dry_run = options["ids"], options["dry_run"]
        if ids and (filters.given or options["all"]):
            raise CommandError(f"{name}: give job ids or filters, not both", returncode=ERROR)
        if not ids and not filters.given and not options["all"]:
            raise CommandError(
                f"{name}: name the jobs: ids (workqueue {name} 12 13), filters (--queue, --task, "
                f"--status, --error-type, --error, --older-than) or --all",
                returncode=ERROR,
            )
        if ids:
            report = actions.on_ids(action, ids, alias, dry_run=dry_run)
        else:
            total = None if dry_run else actions.on_filter_total(action, filters, alias)
            if options["all"] and not dry_run and not options["yes"]:
                self._confirm(f"{name} --all", f"{name} {total} job(s)")
            with tables.progress_bar(self.stderr, name, total) as advance:
                report = actions.on_filter(action, filters, alias, dry_run=dry_run, advance=advance)
        if not dry_run:
            target = actions.audit_target(ids, filters, everything=options["all"])
            self._audit(alias, name, target, report.changed)
        self._report(report)

    def _signal(self, alias: str, options: dict[str, Any]) -> None:
        pk, name = options["id"], options["name"]
        try:
            result = operations.send_signal(pk, name, options["payload"], alias=alias)
        except Job.DoesNotExist:
            raise CommandError(f"there is no job {pk}", returncode=ERROR) from None
        except EnqueueError as exc:  # a bad name, a payload too large
            raise CommandError(f"signal: {exc}", returncode=ERROR) from exc
        self._audit(alias, "signal", {"ids": [pk], "signal": name}, result.count)
        if self.json:
            report = {"action": result.action, "count": result.count, "message": result.message}
            tables.dump(self.stdout, report)
        else:
            self.stdout.write(result.message)
        if not result.count:
            raise CommandError("signal: nothing to change", returncode=NOTHING_CHANGED)

    def _purge(self, alias: str, options: dict[str, Any]) -> None:
        if options["ids"]:
            return self._purge_ids(alias, options)
        policy = actions.purge_policy(options["status"], options["older_than"])
        dry_run = options["dry_run"]
        total = None if dry_run else actions.purge_total(policy, alias)
        if not dry_run and not options["yes"]:
            self._confirm("purge", f"delete {total} finished job(s) and their finished workflows")
        with tables.progress_bar(self.stderr, "purge", total) as advance:
            result = actions.purge(policy, alias, dry_run=dry_run, advance=advance)
        if not dry_run:
            target = {"retention_days": result["retention_days"]}
            self._audit(alias, "purge", target, result["total"])
        if self.json:
            tables.dump(self.stdout, result)
        else:
            verb = "would delete" if dry_run else "deleted"
            per_status = ", ".join(f"{n} {s}" for s, n in result["jobs"].items())
            self.stdout.write(
                f"purge {verb} {result['total']} job(s) ({per_status}) and "
                f"{result['workflows']} workflow(s)"
            )
        if not result["total"] and not result["workflows"]:
            raise CommandError("nothing to purge", returncode=NOTHING_CHANGED)

    def _purge_ids(self, alias: str, options: dict[str, Any]) -> None:
        """``purge ID ...``: the chosen finished jobs now (``operations.purge_jobs``)."""
        if options["older_than"] or options["status"]:
            raise CommandError(
                "purge: give job ids or --older-than/--status, not both", returncode=ERROR
            )
        ids = list(dict.fromkeys(options["ids"]))
        if options["dry_run"]:
            would = purgeable(Job.objects.using(alias).filter(pk__in=ids)).count()
            report = {"action": "purge", "dry_run": True, "total": would, "ids": ids}
            message = f"purge would delete {would} of {len(ids)} job(s)"
        else:
            result = operations.purge_jobs(ids, alias=alias)
            self._audit(alias, "purge", {"ids": ids}, result.count)
            would = result.count
            report = {"action": "purge", "dry_run": False, "total": result.count, "ids": ids}
            message = f"purge: {result.message}"
        if self.json:
            tables.dump(self.stdout, report)
        else:
            self.stdout.write(message)
        if not would:
            raise CommandError("nothing to purge", returncode=NOTHING_CHANGED)

    def _import_tasks_db(self, alias: str, options: dict[str, Any]) -> None:
        include_running = options["include_running"]
        try:
            report = tasks_db_import.import_rows(
                dry_run=options["dry_run"], include_running=include_running
            )
        except tasks_db_import.ImportRefused as exc:
            raise CommandError(str(exc), returncode=ERROR) from exc
        if not report.dry_run and report.moved:
            target = {"source": "django-tasks-db", "include_running": include_running}
            self._audit(alias, "import-django-tasks-db", target, report.moved)
        if self.json:
            self.stdout.write(json.dumps(dataclasses.asdict(report)))
        else:
            verb = "would move" if report.dry_run else "moved"
            self.stdout.write(f"{verb} {report.moved} django-tasks-db row(s) into jobs")
            for path, count in sorted(report.by_task.items()):
                self.stdout.write(f"  {path}: {count}")
        if report.running_left:
            self.stderr.write(
                f"{report.running_left} RUNNING row(s) not moved: django-tasks-db records no "
                f"worker liveness, so one may be running in a live db_worker. Stop every "
                f"db_worker, then run again with --include-running (they start again)."
            )
        if not report.moved:
            raise CommandError("nothing to move", returncode=NOTHING_CHANGED)

    def _filters(self, options: dict[str, Any]) -> Filters:
        try:
            return filters_from(options, self.authority.clearance)
        except ErrorTextHidden as exc:
            raise CommandError(f"--error: {exc} (--error-type NAME)", returncode=ERROR) from exc

    def _audit(self, alias: str, action: str, target: dict[str, Any], changed: int) -> None:
        # After the change, in a transaction of its own: a change by filter or a purge runs in
        # many transactions (one per batch), and one record with the total serves the reader.
        audit.record(
            self.authority.actor, action, target, changed, AuditSource.CLI, alias=alias,
            via=self.authority.via,
        )  # fmt: skip

    def _confirm(self, command: str, change: str) -> None:
        confirm(
            change, command=f"workqueue {command}", returncode=ERROR,
            declined_returncode=NOTHING_CHANGED,
        )  # fmt: skip

    def _explain(self, alias: str, pk: int) -> None:
        job = Job.objects.using(alias).filter(pk=pk).first()
        if job is None:
            raise CommandError(f"there is no job {pk}", returncode=ERROR)
        answer = operations.explain(job, clearance=self.authority.clearance, alias=alias)
        if self.json:
            tables.dump(self.stdout, answer.as_dict())
        else:
            explanation.write(self.stdout, answer)

    def _show(self, data: Any, render: Any) -> None:
        if self.json:
            tables.dump(self.stdout, data)
            return
        tables.show(self.stdout, render(data))

    def _report(self, report: actions.Report) -> None:
        if self.json:
            tables.dump(self.stdout, report.as_json())
        else:
            for message in report.messages:
                self.stdout.write(message)
        if report.missing:
            missing = ", ".join(map(str, report.missing))
            raise CommandError(f"{report.action}: not found: {missing}", returncode=ERROR)
        if not (report.matched if report.dry_run else report.changed):
            raise CommandError(f"{report.action}: nothing to change", returncode=NOTHING_CHANGED)
