"""The HTTP API (Django REST framework, an optional extra: ``pip install django-workqueue[api]``).

Mount it in your project's urls, under any prefix:

>>> path("api/workqueue/", include("django_workqueue.api.urls"))

Design: every view names its authentication (session or HTTP basic) and its permission class
itself, never the project's REST_FRAMEWORK defaults, and every route is denied unless the
user holds the workqueue permission of its action (``django_workqueue.permissions``, the model
the admin, the websockets and the ``workqueue`` command share). Changes are POST only, go
through ``django_workqueue.operations`` and are audited with source "api". Nothing outside
this package imports rest_framework. The reference is ``docs/reference/http-api.md``,
generated from the OpenAPI schema that ``schema/`` serves.
"""
