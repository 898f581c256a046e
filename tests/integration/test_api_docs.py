"""docs/reference/http-api.md is generated from the OpenAPI schema; this test fails when the
committed page no longer matches the schema, and says how to regenerate it."""

from __future__ import annotations

from pathlib import Path

from django_workqueue.api.docs import render
from django_workqueue.api.schema import build_schema

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "http-api.md"
FIX = (
    "DJANGO_SETTINGS_MODULE=testproject.settings python -m django_workqueue.api.docs "
    "> docs/reference/http-api.md"
)


def test_the_http_api_reference_matches_the_schema():
    assert PAGE.read_text() == render(build_schema()), (
        f"docs/reference/http-api.md is out of date with the API's schema; regenerate it: {FIX}"
    )


def test_the_reference_lists_every_operation_with_its_permission():
    page = PAGE.read_text()

    for path, methods in build_schema()["paths"].items():
        for method in methods:
            assert f"### {method.upper()} `{path}`" in page
    assert (
        "| POST | [`/api/workqueue/jobs/`](#post--api-workqueue-jobs) | Enqueue a job | "
        "`django_workqueue.add_job` |" in page
    )
