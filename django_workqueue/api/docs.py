"""Render the API's reference (``docs/reference/http-api.md``) from its OpenAPI schema, so the
page cannot drift from the code: a test compares the committed page with this output.

    DJANGO_SETTINGS_MODULE=testproject.settings python -m django_workqueue.api.docs \\
        > docs/reference/http-api.md
"""

from __future__ import annotations

import sys
from http import HTTPStatus
from typing import Any

INTRO = """\
Mount the API in your project's URLs (it needs the `api` extra:
`pip install "django-workqueue[api]"`, and `rest_framework` in `INSTALLED_APPS`):

```python
urlpatterns = [
    path("api/workqueue/", include("django_workqueue.api.urls")),
]
```

The paths below assume that prefix. Every route:

- authenticates with HTTP basic or a Django session, whatever the project's
  `REST_FRAMEWORK` defaults say. Session-authenticated POSTs need the CSRF token
  (`X-CSRFToken` header); anonymous requests get 401. Serve it over HTTPS only: basic
  authentication sends the password with every request, and the server checks it every time
  (a password hash, on purpose slow), so a client making many calls should log in once and
  use the session.
- needs one workqueue permission, named in its description: the same permissions the admin,
  the websockets and `manage.py workqueue` check ([permissions](../explanation/permissions.md)).
  Without it the answer is 403 and names the permission to grant.
- reads with GET and changes with POST (PUT, PATCH, DELETE and OPTIONS answer 405). Each
  change goes through `django_workqueue.operations` and writes an audit record with source
  `api`.
- speaks JSON only. Bodies larger than `WORKQUEUE["MAX_PAYLOAD_BYTES"]` plus 64 KiB are
  refused with 413 before they are parsed.

Unknown ids, queues and schedules answer 404; a bad filter or body answers 400 with the
problem, keyed by the parameter or field (`{"status": "'dead' is not a job status; …"}`).
Every id is a whole number from 1 to 2**63 - 1 and every name in a filter 1 to 255 characters
without a NUL character, on SQLite and PostgreSQL alike (`django_workqueue.filter_values`,
the rule of the admin and `manage.py workqueue` too): `{"workflow": 10**30}` is a 400.
What a job, a workflow or a schedule shows depends on the user: arguments and results (a
job's, a workflow's, a schedule's arguments) and derived unique keys need `view_job_payload`,
tracebacks `view_job_traceback`, and error and progress messages are redacted without the
payload permission; filters match errors by type, never by their text. Lists of jobs and
workflows are newest first, a page at a time: follow `next` and `previous` (cursor
pagination; `limit` sets the page size, at most 500).

Only tasks registered with `@task(api=True)` can be enqueued through `POST jobs/`, and the
arguments are checked against the task function's parameters. The schema itself is served at
`schema/` (JSON, or YAML with `?format=yaml`) to users with `view_job`.

**Unique keys of API jobs live in a namespace of their own.** The key of a job enqueued
through the API — the `unique_key` of the body, or the key `@task(unique_on=...)` derives from
its arguments — is stored as `@args:api:` followed by the key the application would use
(`@args:api:order-42`, `@args:api:@args:{"email":"a@example.com"}`; a digest, `@args#…`, when
longer than 255 characters). The application's own keys never begin so, so an API caller can
neither take a key first (and have the application's later enqueue silently return the
caller's job and arguments) nor reach the application's jobs through one. API callers share
the namespace with each other: a key that an earlier API enqueue holds gives its job back
(200, `duplicate: true`). That answer shows the job as the caller may see it: the full job
(arguments, result and key as `view_job_payload` allows) with `view_job`, and without
`view_job` only `{"id": …, "duplicate": true}`. Like the keys `unique_on` derives, an API
key reads `@args:(hidden)` to users without `view_job_payload`.
"""

HEADER = (
    "<!-- Generated from the OpenAPI schema by `python -m django_workqueue.api.docs`: "
    "edit the views and serializers, then regenerate (tests/integration/test_api_docs.py). -->"
)


def render(schema: dict[str, Any]) -> str:
    """The Markdown reference of ``schema`` (an OpenAPI 3 document)."""
    info = schema["info"]
    out = [HEADER, "", f"# {info['title']}", "", info.get("description", ""), "", INTRO]
    operations = [
        (path, method, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]
    out += [
        "## Operations",
        "",
        "| method | path | what it does | permission |",
        "| --- | --- | --- | --- |",
    ]
    for path, method, operation in operations:
        out.append(
            f"| {method.upper()} | [`{path}`](#{_anchor(method, path)}) | "
            f"{operation.get('summary', '')} | {_permission(operation)} |"
        )
    tags: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, method, operation in operations:
        tags.setdefault((operation.get("tags") or ["other"])[0], []).append(
            (path, method, operation)
        )
    for tag, members in tags.items():
        out += ["", f"## {tag}"]
        for path, method, operation in members:
            out += _operation(path, method, operation)
    out += ["", "## Schemas"]
    for name, component in schema["components"]["schemas"].items():
        out += _component(name, component)
    return "\n".join(out).rstrip() + "\n"


def _anchor(method: str, path: str) -> str:
    text = f"{method} {path}".lower()
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _permission(operation: dict[str, Any]) -> str:
    description = operation.get("description", "")
    marker = "`django_workqueue."
    start = description.find(marker)
    if start < 0:
        return ""
    return description[start : description.index("`", start + 1) + 1]


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    out = [
        "", f'<a id="{_anchor(method, path)}"></a>', "",
        f"### {method.upper()} `{path}`", "", f"**{operation.get('summary', '')}.** "
        + operation.get("description", "").replace("\n\n", " "),
    ]  # fmt: skip
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["", "| parameter | in | type | description |", "| --- | --- | --- | --- |"]
        for parameter in parameters:
            out.append(
                f"| `{parameter['name']}` | {parameter['in']} | {_type(parameter['schema'])} | "
                f"{_cell(parameter.get('description', ''))} |"
            )
    body = operation.get("requestBody")
    if body:
        media = body["content"].get("application/json", {})
        out += ["", f"Request body (JSON): {_type(media.get('schema', {}))}"]
    out += ["", "| status | body | meaning |", "| --- | --- | --- |"]
    for status, response in operation.get("responses", {}).items():
        media = response.get("content", {}).get("application/json")
        shape = _type(media["schema"]) if media else ""
        meaning = response.get("description") or HTTPStatus(int(status)).phrase
        out.append(f"| {status} | {shape} | {_cell(meaning)} |")
    return out


def _component(name: str, component: dict[str, Any]) -> list[str]:
    out = ["", f"### {name}", ""]
    if component.get("description") and "enum" not in component:
        out += [_cell(component["description"]), ""]
    if "enum" in component:
        return [*out, "One of: " + ", ".join(f"`{value}`" for value in component["enum"])]
    if "oneOf" in component:
        return [*out, "One of: " + ", ".join(_type(item) for item in component["oneOf"])]
    required = set(component.get("required", ()))
    out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for field, spec in component.get("properties", {}).items():
        flags = "yes" if field in required else "no"
        out.append(f"| `{field}` | {_type(spec)} | {flags} | {_cell(_describe(spec))} |")
    return out


def _describe(spec: dict[str, Any]) -> str:
    text = spec.get("description", "")
    bounds = [
        phrase.format(spec[key])
        for key, phrase in (
            ("minimum", "min {}"), ("maximum", "max {}"), ("maxLength", "at most {} characters"),
            ("maxItems", "at most {} items"),
        )
        if key in spec
    ]  # fmt: skip
    if "default" in spec:
        bounds.append(f"default `{spec['default']}`")
    if text and bounds:
        return f"{text}{'' if text.endswith('.') else ';'} {', '.join(bounds)}"
    return text or ", ".join(bounds)


def _type(spec: dict[str, Any]) -> str:
    """A schema as a short phrase: links for components, ``array of …``, formats, nullability."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        text = f"[{name}](#{name.lower()})"
    elif "allOf" in spec and len(spec["allOf"]) == 1:
        text = _type(spec["allOf"][0])
    elif "oneOf" in spec:
        text = " or ".join(_type(item) for item in spec["oneOf"])
    elif spec.get("type") == "array":
        text = f"array of {_type(spec.get('items', {}))}"
    elif spec.get("type") == "object" and "additionalProperties" in spec:
        values = spec["additionalProperties"]
        text = "object of " + (_type(values) if isinstance(values, dict) else "any")
    elif "type" in spec:
        text = spec["type"] + (f" ({spec['format']})" if "format" in spec else "")
        if "enum" in spec:
            text += ": " + ", ".join(f"`{value}`" for value in spec["enum"])
    else:
        text = "any JSON"
    return text + (" or null" if spec.get("nullable") else "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main() -> None:
    # Imported here: run as a script (``python -m django_workqueue.api.docs``), which sets
    # Django up first; the schema imports the API's views, which import the models.
    import django

    django.setup()
    from .schema import build_schema  # after django.setup(): see above

    sys.stdout.write(render(build_schema()))


if __name__ == "__main__":
    main()
