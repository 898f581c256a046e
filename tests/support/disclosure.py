"""A scene of rows holding hidden values (``disclosure.HIDDEN``), in "worlds" that differ only
in what a viewer may not see, and the surfaces that show rows to a user.

``HIDDEN_VALUES`` is a table: each row names a hidden field and writes a world's secret into
the scene so that a user without the clearance sees the same thing in every world (a
secret-looking pair in a message, the derived part of a key). A feature that adds a hidden
field adds a row here; every surface of ``SURFACES`` is then walked for it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from django_workqueue.disclosure import Clearance
from django_workqueue.models import Checkpoint, FlowLimit, Job, Schedule, Signal, Workflow
from django_workqueue.realtime import messages
from tests.support.commands import run_workqueue
from tests.support.factories import JobFactory

TASK = "testproject.testapp.tasks.add"
ERROR_TYPE = "builtins.ValueError"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Scene:
    job: Job
    other: Job
    workflow: Workflow
    schedule: Schedule


def build_scene() -> Scene:
    workflow = Workflow.objects.create(name="nightly", total=2, open=0, succeeded=2)
    failed = {"failed": True, "workflow": workflow, "task_name": TASK}
    job = JobFactory(**failed)
    other = JobFactory(**failed)
    schedule = Schedule.objects.create(name="hourly", task_name=TASK, cron="0 * * * *")
    return Scene(job=job, other=other, workflow=workflow, schedule=schedule)


def _error(secret: str) -> list[dict[str, Any]]:
    return [{
        "attempt": 1, "at": "2026-01-01T00:00:00+00:00", "type": ERROR_TYPE,
        "message": f"login failed: password={secret}-message",
        "traceback": f"Traceback (most recent call last):\n  {secret}-traceback\n",
    }]  # fmt: skip


def _limit_keys(scene: Scene, secret: str) -> None:
    # The key is the primary key: the rows are written again, in the same order every world,
    # and last used at the same moment (ties that only the key could break).
    FlowLimit.objects.all().delete()
    used = timezone.now().replace(microsecond=0) - dt.timedelta(minutes=1)
    FlowLimit.objects.bulk_create([
        FlowLimit(key=f"limit:{TASK}:{secret}-limit", updated_at=used),
        FlowLimit(key=f"limit:{TASK}:{secret[::-1]}-limit", updated_at=used),
        FlowLimit(key=f"limit:{TASK}", updated_at=used - dt.timedelta(minutes=1)),
    ])  # fmt: skip


def _step_results(scene: Scene, secret: str) -> None:
    Checkpoint.objects.all().delete()
    for job, value in ((scene.job, secret), (scene.other, secret[::-1])):
        Checkpoint.objects.create(job=job, name="charge", result={"charge": f"{value}-step"})


def _signal_payloads(scene: Scene, secret: str) -> None:
    Signal.objects.all().delete()
    for job, value in ((scene.job, secret), (scene.other, secret[::-1])):
        Signal.objects.create(job=job, name="approve", payload={"by": f"{value}-signal"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HiddenValue:
    name: str
    """The catalogue row it exercises (``Model.field``)."""
    write: Callable[[Scene, str], None]
    """Write a world's secret: ``"<secret>-<part>"`` ends up in the row for each of ``parts``."""
    parts: tuple[str, ...]


def _job(**fields: Callable[[str], Any]) -> Callable[[Scene, str], None]:
    def write(scene: Scene, secret: str) -> None:
        Job.objects.filter(pk=scene.job.pk).update(
            **{name: value(secret) for name, value in fields.items()}
        )
        # The other job holds the secret reversed: a filter sees both.
        Job.objects.filter(pk=scene.other.pk).update(
            **{name: value(secret[::-1]) for name, value in fields.items()}
        )

    return write


HIDDEN_VALUES: tuple[HiddenValue, ...] = (
    HiddenValue(name="Job.args", parts=("args",), write=_job(args=lambda s: [f"{s}-args"])),
    HiddenValue(
        name="Job.kwargs", parts=("kwargs",), write=_job(kwargs=lambda s: {"to": f"{s}-kwargs"})
    ),
    HiddenValue(
        name="Job.result", parts=("result",), write=_job(result=lambda s: {"sent": f"{s}-result"})
    ),
    HiddenValue(
        name="Job.progress_details",
        parts=("details",),
        write=_job(progress_details=lambda s: {"at": f"{s}-details"}),
    ),
    HiddenValue(
        name="Job.progress_message",
        parts=("progress",),
        write=_job(progress_message=lambda s: f"calling with token={s}-progress"),
    ),
    HiddenValue(name="Job.errors", parts=("message", "traceback"), write=_job(errors=_error)),
    HiddenValue(
        name="Job.unique_key",
        parts=("unique",),
        write=_job(unique_key=lambda s: "@args:" + json.dumps({"email": f"{s}-unique"})),
    ),
    HiddenValue(
        name="Job.flow_key", parts=("flow",), write=_job(flow_key=lambda s: f"fair:{s}-flow")
    ),
    HiddenValue(
        name="Workflow.result",
        parts=("workflow",),
        write=lambda scene, s: Workflow.objects.filter(pk=scene.workflow.pk).update(
            result=[f"{s}-workflow"]
        ),
    ),
    HiddenValue(
        name="Schedule.args",
        parts=("schedule-args",),
        write=lambda scene, s: Schedule.objects.filter(pk=scene.schedule.pk).update(
            args=[f"{s}-schedule-args"]
        ),
    ),
    HiddenValue(
        name="Schedule.kwargs",
        parts=("schedule-kwargs",),
        write=lambda scene, s: Schedule.objects.filter(pk=scene.schedule.pk).update(
            kwargs={"to": f"{s}-schedule-kwargs"}
        ),
    ),
    HiddenValue(name="FlowLimit.key", parts=("limit",), write=_limit_keys),
    HiddenValue(name="Checkpoint.result", parts=("step",), write=_step_results),
    HiddenValue(name="Signal.payload", parts=("signal",), write=_signal_payloads),
)


def write_world(scene: Scene, secret: str) -> None:
    """Every hidden value of the scene made of ``secret``."""
    for row in HIDDEN_VALUES:
        row.write(scene, secret)


# --- the surfaces ------------------------------------------------------------------------


def admin_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def _admin(name: str, *args: Any, query: str = "") -> Callable[[User, Scene], str]:
    def render(user: User, scene: Scene) -> str:
        resolved = [getattr(scene, arg).pk if isinstance(arg, str) else arg for arg in args]
        response = admin_client(user).get(reverse(name, args=resolved) + query)
        return f"{response.status_code}\n{response.content.decode()}"

    return render


def _api(path: str) -> Callable[[User, Scene], str]:
    def render(user: User, scene: Scene) -> str:
        url = "/api/workqueue/" + path.format(job=scene.job.pk, workflow=scene.workflow.pk)
        response = api_client(user).get(url)
        return f"{response.status_code}\n{response.content.decode()}"

    return render


def _cli(*args: str) -> Callable[[User, Scene], str]:
    def render(user: User, scene: Scene) -> str:
        argv = [arg.format(job=scene.job.pk) for arg in args]
        code, out, err = run_workqueue("--user", user.get_username(), *argv)
        return f"{code}\n{out}\n{err}"

    return render


def _websocket(user: User, scene: Scene) -> str:
    """What a job's websocket sends: the snapshot and a progress report, for the user's
    clearance (``consumers`` build every job message so)."""
    row = Job.objects.filter(pk=scene.job.pk).values(*messages.JOB_FIELDS).get()
    state = messages.job_state(row)
    clearance = Clearance.of(user)
    sent = [
        messages.job_message("snapshot", state, clearance),
        messages.job_message("progress", messages.with_progress(state, state["progress"]),
                             clearance),
    ]  # fmt: skip
    return json.dumps(sent)


SURFACES: dict[str, Callable[[User, Scene], str]] = {
    "admin job page": _admin("admin:django_workqueue_job_change", "job"),
    "admin job list": _admin("admin:django_workqueue_job_changelist"),
    "admin workflow page": _admin("admin:django_workqueue_workflow_change", "workflow"),
    "admin workflow list": _admin("admin:django_workqueue_workflow_changelist"),
    "admin schedule page": _admin("admin:django_workqueue_schedule_change", "schedule"),
    "admin schedule list": _admin("admin:django_workqueue_schedule_changelist"),
    "admin flow limit list": _admin("admin:django_workqueue_flowlimit_changelist"),
    "admin queues page": _admin("admin:django_workqueue_queue_changelist"),
    "admin dashboard": _admin("admin:django_workqueue_dashboard"),
    "api job": _api("jobs/{job}/"),
    "api jobs": _api("jobs/"),
    "api workflow": _api("workflows/{workflow}/"),
    "api workflows": _api("workflows/"),
    "api schedules": _api("schedules/"),
    "websocket job message": _websocket,
    "cli show --json": _cli("show", "{job}", "--json"),
    "cli show": _cli("show", "{job}"),
    "cli jobs --json": _cli("jobs", "--json"),
    "cli jobs": _cli("jobs"),
}
"""Every place a user reads rows, by name: what it answers the user, as text."""
