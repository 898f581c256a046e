"""The test project's ASGI application: Django over HTTP, the workqueue's websockets under
``/ws/workqueue/`` (when the realtime extra is installed). Serve it with
``daphne testproject.asgi:application``."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django_asgi_app = get_asgi_application()  # sets Django up before the consumers are imported

from django.conf import settings  # noqa: E402

if settings.DEBUG:  # serve the admin's and the demo's static files, as runserver does
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

if settings.HAS_REALTIME:
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter

    from django_workqueue.realtime.origins import SameOriginValidator
    from django_workqueue.realtime.routing import websocket_urlpatterns

    application = ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
else:
    application = django_asgi_app
