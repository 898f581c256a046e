"""The websocket routes; mount them in the project's ASGI application::

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from django_workqueue.realtime.origins import SameOriginValidator
from django_workqueue.realtime.routing import websocket_urlpatterns

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": SameOriginValidator(
        AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
    ),
})
"""

from __future__ import annotations

from django.urls import path

from .consumers import JobConsumer, QueueConsumer, WorkflowConsumer

websocket_urlpatterns = [
    path("ws/workqueue/jobs/<int:job_id>/", JobConsumer.as_asgi()),
    path("ws/workqueue/workflows/<int:workflow_id>/", WorkflowConsumer.as_asgi()),
    path("ws/workqueue/queues/<str:queue>/", QueueConsumer.as_asgi()),
]
