"""Live progress over websockets (the optional ``realtime`` extra: Channels, channels-redis).

Three routes (``routing.websocket_urlpatterns``): one job, one workflow, one queue's event
stream. Each connection is authenticated, checks ``view_job``, and sees messages and details
as ``disclosure.Clearance`` allows. Events reach the web process in one of two ways,
``WORKQUEUE["REALTIME"]``:

- ``"database"`` (default): the web process follows the database; one poller per event loop
  reads every followed job, workflow and queue in one round of queries per interval
  (``follower.py``).
- ``"channel_layer"``: the signal receivers of the process that changes a job (usually the
  worker) publish to Channels groups (``events.py``); web processes listen to those groups.

Only this package imports ``channels``; the rest of the app runs without it.
"""
