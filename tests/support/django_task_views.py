"""Views that enqueue a ``django.tasks`` task defined next to them, not in a tasks.py: only
the URLconf (``tests.support.urls_with_django_tasks``) imports this module."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.tasks import task


@task
def greet(name: str) -> str:
    return f"hello {name}"


def greet_view(request: HttpRequest) -> JsonResponse:
    result = greet.enqueue(request.GET.get("name", "you"))
    return JsonResponse({"id": result.id})
