import pytest

from django_workqueue import chain, group, operations
from django_workqueue.models import Job
from testproject.testapp.tasks import add, collect, double, echo, fail_step, fan_out, total

pytestmark = pytest.mark.django_db(transaction=True)


def test_chain(drain):
    wf = chain(add.s(1, 2), double.s(), double.s()).enqueue()
    assert wf.counts == {"total": 3, "open": 3, "succeeded": 0, "failed": 0, "cancelled": 0}
    drain()
    wf.refresh_from_db()
    assert wf.status == "succeeded", list(Job.objects.values_list("status", "errors"))
    assert wf.result == 12


def test_chord(drain):
    wf = group(double.s(i) for i in range(5)).then(total.s(extra=1)).enqueue()
    drain()
    wf.refresh_from_db()
    assert wf.result == 21, list(Job.objects.values_list("status", "errors"))
    assert wf.counts["succeeded"] == 6


def test_failure_cancels(drain):
    wf = chain(fail_step.s(), echo.s(), echo.s()).enqueue()
    drain()
    wf.refresh_from_db()
    assert wf.status == "failed"
    assert wf.counts == {"total": 3, "open": 0, "succeeded": 0, "failed": 1, "cancelled": 2}
    print([j.errors for j in Job.objects.all()])


def test_fan_out(drain):
    wf = chain(fan_out.s(3, then="collect"), echo.s()).enqueue()
    drain()
    wf.refresh_from_db()
    assert wf.status == "succeeded", list(Job.objects.values_list("task_name", "status", "errors"))
    assert wf.result == [0, 2, 4]


def test_depends_on_and_complete(drain):
    a = echo.enqueue(1)
    b = echo.using(delay=3600).enqueue(2)
    c = collect.using(depends_on=[a, b]).enqueue()
    assert c.status == "blocked"
    drain()
    operations.complete_job(b, "approved")
    drain()
    c.refresh_from_db()
    assert c.result == [1, "approved"]
