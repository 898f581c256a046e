"""The dashboard: what waits and runs per queue, throughput and failures per minute over the
last hour as SVG charts, wait and run percentiles, and the dead-letter queue by error type with
"redrive all like this".

Nothing here scans the jobs table: waiting counts come from ``stats.snapshot()`` (the index of
unfinished jobs), finished counts are capped or estimated (``pagination.EstimatedCountPaginator``),
the charts read the per-minute ``StatsCounter`` rows (kept an hour), and the dead-letter groups
read the newest failed jobs only (``deadletters.RECENT``).
"""

from __future__ import annotations

import collections
from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from .. import audit, permissions, stats
from ..conf import workqueue_settings as conf
from ..models import Job, StatsCounter
from ..states import TERMINAL, Status
from .deadletters import dead_letter_groups, redrive_like
from .pagination import EstimatedCountPaginator
from .svg import bar_chart

CHART_MINUTES = 60
"""The charts' span: the counters are kept an hour (``stats.counters.KEEP``)."""


APP_LABEL = "django_workqueue"


def dashboard_entry(site: admin.AdminSite) -> dict[str, Any]:
    """The dashboard as an entry of the app's list (the shape of the admin's model entries)."""
    return {
        "name": "Dashboard", "object_name": "Dashboard", "model": None,
        "perms": {"add": False, "change": False, "delete": False, "view": True},
        "admin_url": reverse("admin:django_workqueue_dashboard", current_app=site.name),
        "add_url": None, "view_only": True,
    }  # fmt: skip


def dashboard_urls(site: admin.AdminSite) -> list[URLPattern]:
    """The dashboard's URLs in ``site``'s namespace: ``admin:django_workqueue_dashboard`` and
    the POST ``admin:django_workqueue_dashboard_redrive``."""
    return [
        path("django_workqueue/dashboard/", site.admin_view(lambda r: dashboard_view(r, site)),
             name="django_workqueue_dashboard"),
        path("django_workqueue/dashboard/redrive/",
             site.admin_view(require_POST(redrive_view)),
             name="django_workqueue_dashboard_redrive"),
    ]  # fmt: skip


def dashboard_view(request: HttpRequest, site: admin.AdminSite) -> HttpResponse:
    if not permissions.allowed(request.user, "view"):
        raise PermissionDenied(permissions.permission("view"))
    db = conf.DATABASE
    snap = stats.snapshot(alias=db)
    waiting: collections.Counter[str] = collections.Counter()
    for queue in snap.queues:
        waiting.update(queue.counts)
    finished = {}
    for status in sorted(TERMINAL):
        paginator = EstimatedCountPaginator(Job.objects.using(db).filter(status=status), 1)
        finished[str(status)] = (paginator.count, paginator.approximate, paginator.estimated)
    per_minute = _per_minute(db, snap.taken_at)
    throughput = [sum(per_minute[m][name] for name in ("succeeded", "failed", "cancelled"))
                  for m in sorted(per_minute)]  # fmt: skip
    failure = [_failure_rate(per_minute[m]) for m in sorted(per_minute)]
    span = (f"{CHART_MINUTES} min ago", "now")
    context = {
        **site.each_context(request),
        "title": "Workqueue dashboard",
        "wq_snapshot": snap,
        "wq_waiting": [(str(s), waiting.get(str(s), 0)) for s in Status if s not in TERMINAL],
        "wq_finished": finished,
        "wq_windows": [(q, q.window(15)) for q in snap.queues],
        "wq_throughput_svg": bar_chart(throughput, label="jobs finished per minute", span=span),
        "wq_failure_svg": bar_chart(failure, label="failed attempts per attempt, per minute",
                                    unit="%", css_class="wq-chart wq-chart-failures",
                                    span=span),
        "wq_chart_minutes": CHART_MINUTES,
        "wq_dead_letters": dead_letter_groups(Job.objects.using(db).all()),
        "wq_can_redrive": permissions.allowed(request.user, "redrive"),
    }  # fmt: skip
    return TemplateResponse(request, "admin/django_workqueue/dashboard.html", context)


def _per_minute(db: str, now: Any) -> dict[Any, collections.Counter[str]]:
    """Endings per minute of the last ``CHART_MINUTES`` (every minute present, oldest first)."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=CHART_MINUTES - 1)
    minutes = {start + timedelta(minutes=i): collections.Counter[str]()
               for i in range(CHART_MINUTES)}  # fmt: skip
    rows = (
        StatsCounter.objects.using(db)
        .filter(minute__gte=start, name__in=["succeeded", "failed", "cancelled", "retried"])
        .order_by()
        .values_list("minute", "name")
        .annotate(n=Sum("count"))
    )
    for minute, name, n in rows:
        minutes.setdefault(minute, collections.Counter())[name] += n
    return minutes


def _failure_rate(ends: collections.Counter[str]) -> float:
    attempts = ends["succeeded"] + ends["failed"] + ends["retried"]
    return round(100 * (ends["failed"] + ends["retried"]) / attempts, 1) if attempts else 0.0


def redrive_view(request: HttpRequest) -> HttpResponse:
    """ "Redrive all like this": every failed job whose last error is of the posted type."""
    permissions.require(request.user, "redrive")
    error_type = request.POST.get("error_type", "").strip()
    if not error_type:
        messages.error(request, "Name the error type to redrive.")
    else:
        jobs = Job.objects.using(conf.DATABASE).all()
        changed = redrive_like(jobs, error_type)
        audit.record(request.user, "redrive", {"filter": {"status": ["failed"],
                     "last_error_type": error_type}}, changed, "admin")  # fmt: skip
        level = messages.SUCCESS if changed else messages.WARNING
        messages.add_message(
            request, level, f"{changed} job(s) failing with {error_type} redriven."
        )
    return HttpResponseRedirect(reverse("admin:django_workqueue_dashboard"))
