import uuid

from django.db import models


class DBTaskResult(models.Model):
    """The columns of django_tasks_db.models.DBTaskResult (statuses: READY, RUNNING,
    SUCCESSFUL, FAILED; ``run_after`` year 9999 for "no run_after")."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(default="READY", max_length=10)
    enqueued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    args_kwargs = models.JSONField()
    priority = models.IntegerField(default=0)
    task_path = models.TextField()
    worker_ids = models.JSONField(default=list)
    queue_name = models.CharField(default="default", max_length=32)
    backend_name = models.CharField(max_length=32)
    run_after = models.DateTimeField()
    return_value = models.JSONField(default=None, null=True)
    exception_class_path = models.TextField()
    traceback = models.TextField()

    def __str__(self) -> str:
        return f"{self.task_path} {self.id} ({self.status})"
