"""An ASGI application that serves HTTP only: the test project as a project without the
websocket routes mounted (``ASGI_APPLICATION="tests.support.asgi_routes.http_only"``)."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
http_only = get_asgi_application()

if settings.DEBUG:  # the admin's static files, as testproject.asgi serves them
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_only = ASGIStaticFilesHandler(http_only)
