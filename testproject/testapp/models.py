"""Tables the test tasks write to, so tests can count what really ran."""

from django.db import models


class LedgerEntry(models.Model):
    """One row per attempt that reached the task body, written in autocommit."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    pid = models.PositiveIntegerField()
    note = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} ({self.note})"


class Effect(models.Model):
    """Written inside an atomic=True task's transaction: exists iff the job succeeded."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    value = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return f"effect of job {self.job_id} attempt {self.attempt}"


class WorkflowEffect(models.Model):
    """Written inside an ``atomic=True`` workflow step's transaction (see the ``workflow_*``
    tasks): the unique constraint makes a second effect of the same step of the same workflow
    an error, so a step that took effect twice could not end succeeded."""

    workflow_id = models.BigIntegerField()
    step = models.CharField(max_length=50)
    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow_id", "step"], name="testapp_effect_once")
        ]

    def __str__(self) -> str:
        return f"{self.step} of workflow {self.workflow_id} (job {self.job_id})"
