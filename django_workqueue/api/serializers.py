"""What the API shows and accepts. Every field of ``disclosure.HIDDEN`` (a job's payload, errors,
progress message and unique key, a workflow's result, a schedule's arguments) is shown as
``disclosure.Clearance`` allows the requesting user (the view passes its clearance in the
serializer's context as ``"clearance"``); nothing else depends on who asks."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import budgets
from ..disclosure import Clearance, journal
from ..filter_values import MAX_ID
from ..models import Job, Schedule, Workflow
from ..registry import MAX_ATTEMPTS
from ..states import CatchUp, Status, WorkflowStatus
from .filters import MAX_IDS, MAX_VALUES

MAX_DELAY = 366 * 24 * 3600
"""The longest ``delay`` an enqueue through the API may ask for: a year, in seconds."""


class ProgressSerializer(serializers.Serializer):
    current = serializers.IntegerField(allow_null=True)
    total = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(help_text="Redacted without the payload permission.")


class ErrorSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(required=False, allow_null=True)
    at = serializers.CharField(required=False, allow_null=True)
    type = serializers.CharField(required=False, allow_null=True)
    message = serializers.CharField(
        required=False, allow_null=True, help_text="Redacted without the payload permission."
    )
    traceback = serializers.CharField(
        required=False, allow_null=True,
        help_text="Null without the traceback permission (view_job_traceback).",
    )  # fmt: skip


class JobSummarySerializer(serializers.Serializer):
    """A job in a list: its state, never its payload."""

    id = serializers.IntegerField()
    task_name = serializers.CharField()
    queue = serializers.CharField()
    priority = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Status.choices)
    attempt = serializers.IntegerField(help_text="Claims so far (each claim fences a worker).")
    max_attempts = serializers.IntegerField(help_text="The body's attempt budget (the task's).")
    attempts_charged = serializers.IntegerField(
        help_text="Body attempts charged against max_attempts since the last redrive."
    )
    crashes_charged = serializers.IntegerField(
        help_text="Crashes charged against the crash budget since the last redrive."
    )
    redriven_attempts = serializers.IntegerField(
        help_text="Body attempts charged before the redrives."
    )
    attempt_summary = serializers.CharField(
        help_text='The attempt as operators read it: "attempt 1 of 5 (3 before the redrive)".'
    )
    run_after = serializers.DateTimeField()
    enqueued_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    workflow = serializers.IntegerField(allow_null=True, source="workflow_id")
    progress = ProgressSerializer()

    def to_representation(self, job: Job) -> Any:
        return super().to_representation(self.row(job, self.context["clearance"]))

    attributes: tuple[str, ...] = (
        "id", "task_name", "queue", "priority", "status", "attempt", "max_attempts",
        "attempts_charged", "crashes_charged", "redriven_attempts", "run_after", "enqueued_at",
        "started_at", "finished_at",
    )  # fmt: skip
    """The fields read from the job as they are."""

    def row(self, job: Job, clearance: Clearance) -> dict[str, Any]:
        row = {name: getattr(job, name) for name in self.attributes}
        row["workflow_id"] = job.workflow_id
        row["attempt_summary"] = budgets.describe_job(job)
        row["progress"] = {
            "current": job.progress_current, "total": job.progress_total,
            "message": clearance.shown(Job, "progress_message", job.progress_message),
        }  # fmt: skip
        return row


class JobSerializer(JobSummarySerializer):
    """One job: everything an operator needs, its payload and tracebacks as the user may see."""

    deadline = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)
    unique_key = serializers.CharField(
        allow_null=True,
        help_text="A key unique_on derived from the arguments reads @args:(hidden) or "
        "@fn:(hidden) without the payload permission.",
    )
    waiting_on = serializers.IntegerField(help_text="Prerequisites not finished yet.")
    run_condition = serializers.CharField()
    lease_owner = serializers.CharField(
        allow_null=True, help_text="The id of the worker running it (see workers/)."
    )
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    payload_hidden = serializers.BooleanField(
        help_text="True when the user lacks view_job_payload: args, kwargs, result and "
        "progress_details are then null."
    )
    args = serializers.JSONField(allow_null=True)
    kwargs = serializers.JSONField(allow_null=True)
    result = serializers.JSONField(allow_null=True)
    progress_details = serializers.JSONField(allow_null=True)
    errors = ErrorSerializer(many=True)
    journal = serializers.JSONField(
        help_text="What the body stored (context.step, sleep, wait_for_signal: steps) and the "
        "signals sent to the job or its workflow (signals); step results and signal payloads "
        "are null without view_job_payload (payload_hidden)."
    )
    duplicate = serializers.BooleanField(
        required=False,
        help_text="After an enqueue: true when a job holding the unique key came back instead.",
    )

    attributes = (
        *JobSummarySerializer.attributes, "deadline", "cancel_requested_at", "unique_key",
        "waiting_on", "run_condition", "lease_owner", "lease_expires_at",
    )  # fmt: skip

    def row(self, job: Job, clearance: Clearance) -> dict[str, Any]:
        row = super().row(job, clearance)
        row.update(clearance.payload_of(job))
        row["unique_key"] = clearance.unique_key(job.unique_key)
        row["errors"] = clearance.shown(Job, "errors", job.errors)
        row["journal"] = journal(job, clearance)
        if hasattr(job, "duplicate"):
            row["duplicate"] = bool(job.duplicate)
        return row


class EnqueueSerializer(serializers.Serializer):
    """A job to enqueue: a task registered with `api=True`, its arguments, and options."""

    task = serializers.CharField(max_length=200, help_text="The task's registered name.")
    args = serializers.ListField(child=serializers.JSONField(), default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), default=dict)
    queue = serializers.CharField(max_length=100, required=False)
    priority = serializers.IntegerField(min_value=-100, max_value=100, required=False)
    delay = serializers.FloatField(
        min_value=0, max_value=MAX_DELAY, required=False, help_text="Seconds to wait first."
    )
    unique_key = serializers.CharField(max_length=255, required=False)
    max_attempts = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPTS, required=False)


class SignalSerializer(serializers.Serializer):
    """A signal for `context.wait_for_signal(name)`: its name and a JSON payload."""

    name = serializers.CharField(max_length=200, help_text="The signal's name, e.g. `approve`.")
    payload = serializers.JSONField(
        required=False, allow_null=True, help_text="Any JSON value (default null)."
    )


class RedriveSerializer(serializers.Serializer):
    """Which failed jobs to move back to ready: a filter (or `all`), tried first with
    `dry_run`."""

    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), max_length=MAX_IDS,
        required=False, help_text="These jobs (those of them that failed).",
    )  # fmt: skip
    queue = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=MAX_VALUES, required=False
    )
    task = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=MAX_VALUES, required=False
    )
    error_type = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=MAX_VALUES, required=False,
        help_text="Jobs with a recorded error of this type (its full name, e.g. "
        "builtins.ValueError). Errors' messages and tracebacks are not searched.",
    )  # fmt: skip
    workflow = serializers.IntegerField(min_value=1, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    all = serializers.BooleanField(
        default=False, help_text="Redrive every failed job (when no filter is given)."
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="Count the jobs it would redrive; change nothing."
    )
    attempts = serializers.IntegerField(
        min_value=1, max_value=MAX_ATTEMPTS, required=False,
        help_text=(
            "The fresh attempt budget, which becomes max_attempts; by default each job keeps "
            "its own."
        ),
    )  # fmt: skip

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {
                    name: f"unknown field; the fields are: {', '.join(self.fields)}"
                    for name in unknown
                }
            )
        return attrs


class RedrivePreviewSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Failed jobs the filter selects.")
    ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="The first 100 of them, by id."
    )


class OperationResultSerializer(serializers.Serializer):
    action = serializers.CharField(help_text='What was done, or "unchanged".')
    count = serializers.IntegerField(help_text="How many jobs (or queues) it changed.")
    message = serializers.CharField()


class ReasonSerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="Which reason (operations.explain.REASONS): finished, running, held, "
        "scheduled, prerequisites, queue_paused, limit, no_worker, not_registered, behind, ready."
    )
    message = serializers.CharField()
    details = serializers.DictField(help_text="The facts the message was made of.")


class ExplanationSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Status.choices)
    running = serializers.BooleanField()
    finished = serializers.BooleanField()
    summary = serializers.CharField(help_text="The reasons in one sentence.")
    reasons = ReasonSerializer(many=True)


class GraphNodeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task_name = serializers.CharField()
    status = serializers.ChoiceField(choices=Status.choices)
    layer = serializers.IntegerField(help_text="Longest path of prerequisites leading to it.")
    row = serializers.IntegerField(help_text="Its place within its layer, from 0.")


# "from" is a keyword: the class is made by call to have a field of that name.
GraphEdgeSerializer = type(
    "GraphEdgeSerializer",
    (serializers.Serializer,),
    {
        "from": serializers.IntegerField(help_text="The prerequisite's job id."),
        "to": serializers.IntegerField(help_text="The job that waits for it."),
    },
)


class GraphSerializer(serializers.Serializer):
    nodes = GraphNodeSerializer(many=True)
    edges = GraphEdgeSerializer(many=True)
    truncated = serializers.BooleanField(help_text="True when only the first jobs are here.")


class WorkflowSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=WorkflowStatus.choices)
    total = serializers.IntegerField(help_text="Jobs in it.")
    open = serializers.IntegerField(help_text="Jobs not finished yet.")
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)


class WorkflowSerializer(WorkflowSummarySerializer):
    result = serializers.SerializerMethodField(
        help_text="Null without the payload permission (view_job_payload)."
    )
    result_hidden = serializers.SerializerMethodField(
        help_text="True when the user lacks view_job_payload: result is then null."
    )
    graph = serializers.SerializerMethodField()

    @extend_schema_field(OpenApiTypes.ANY)
    def get_result(self, workflow: Workflow) -> Any:
        return self.context["clearance"].shown(Workflow, "result", workflow.result)

    def get_result_hidden(self, workflow: Workflow) -> bool:
        return not self.context["clearance"].may_see(Workflow, "result")

    @extend_schema_field(GraphSerializer)
    def get_graph(self, workflow: Workflow) -> dict[str, Any]:
        return self.context["graph"]


class ScheduleSerializer(serializers.Serializer):
    name = serializers.CharField()
    task_name = serializers.CharField()
    cron = serializers.CharField()
    timezone = serializers.CharField()
    args = serializers.SerializerMethodField(
        help_text="Null without the payload permission (view_job_payload)."
    )
    kwargs = serializers.SerializerMethodField(
        help_text="Null without the payload permission (view_job_payload)."
    )
    payload_hidden = serializers.SerializerMethodField(
        help_text="True when the user lacks view_job_payload: args and kwargs are then null."
    )
    queue = serializers.CharField(allow_null=True, help_text="None: the task's own queue.")
    enabled = serializers.BooleanField()
    catch_up = serializers.ChoiceField(choices=CatchUp.choices)
    source = serializers.CharField()
    next_run_at = serializers.DateTimeField(allow_null=True)
    last_run_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(OpenApiTypes.ANY)
    def get_args(self, schedule: Schedule) -> Any:
        return self.context["clearance"].shown(Schedule, "args", schedule.args)

    @extend_schema_field(OpenApiTypes.ANY)
    def get_kwargs(self, schedule: Schedule) -> Any:
        return self.context["clearance"].shown(Schedule, "kwargs", schedule.kwargs)

    def get_payload_hidden(self, schedule: Schedule) -> bool:
        return not self.context["clearance"].may_see(Schedule, "args")


class QueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    paused = serializers.BooleanField()
    paused_at = serializers.DateTimeField(allow_null=True)
    configured = serializers.BooleanField(help_text='Listed in WORKQUEUE["QUEUES"].')


class WorkerSerializer(serializers.Serializer):
    id = serializers.CharField()
    host = serializers.CharField()
    pid = serializers.IntegerField()
    queues = serializers.ListField(child=serializers.CharField())
    concurrency = serializers.IntegerField(help_text="Slots now.")
    concurrency_min = serializers.IntegerField(allow_null=True)
    concurrency_max = serializers.IntegerField(allow_null=True)
    requested_concurrency = serializers.IntegerField(allow_null=True)
    queue_slots = serializers.DictField(child=serializers.IntegerField())
    running = serializers.IntegerField(help_text="Jobs it ran at its last heartbeat.")
    started_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()


class WindowSerializer(serializers.Serializer):
    minutes = serializers.IntegerField()
    seconds = serializers.FloatField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    retried = serializers.IntegerField()
    throughput = serializers.FloatField(help_text="Jobs finished per second.")
    failure_rate = serializers.FloatField(allow_null=True)
    wait_p50 = serializers.FloatField(allow_null=True)
    wait_p95 = serializers.FloatField(allow_null=True)
    run_p50 = serializers.FloatField(allow_null=True)
    run_p95 = serializers.FloatField(allow_null=True)


class StatsSerializer(serializers.Serializer):
    queue = serializers.CharField()
    task_name = serializers.CharField(allow_null=True)
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Unfinished jobs by status."
    )
    backlog = serializers.IntegerField(help_text="Jobs ready and due.")
    oldest_ready_age = serializers.FloatField(allow_null=True)
    windows = WindowSerializer(many=True)


class SnapshotSerializer(serializers.Serializer):
    taken_at = serializers.DateTimeField()
    queues = StatsSerializer(many=True)
    tasks = StatsSerializer(many=True)
