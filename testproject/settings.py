"""Settings of the test project and the demo. The database comes from DATABASE_URL.

DATABASE_URL=sqlite:///demo.sqlite3             (default)
DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
"""

import importlib.util
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = env("SECRET_KEY", default="testproject-not-secret")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "testproject.urls"
STATIC_URL = "static/"
LOGIN_URL = "/admin/login/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_workqueue",
    "testproject.testapp",
    "testproject.demo",
]
# django-tasks-db's table, for `workqueue import-django-tasks-db`: the test suite's copy, which a
# project run from the built wheel (tests/acceptance/test_packaging.py) does not have.
if importlib.util.find_spec("tests") and importlib.util.find_spec("tests.support"):
    INSTALLED_APPS += ["tests.support.django_tasks_db_twin"]
# The API and the websockets are optional extras: the project runs without them (tox env base).
HAS_API = all(importlib.util.find_spec(name) for name in ("rest_framework", "drf_spectacular"))
HAS_REALTIME = importlib.util.find_spec("channels") is not None
if HAS_API:
    INSTALLED_APPS += ["rest_framework", "drf_spectacular"]
    # Hostile defaults on purpose: the API's views name their own authentication and
    # permissions, so nothing of it may depend on these (tests/integration/test_api_security.py).
    REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": [],
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
        "UNAUTHENTICATED_USER": None,
    }
if HAS_REALTIME:
    INSTALLED_APPS += ["channels"]  # after django_workqueue: our runworker wins (DESIGN.md)
    # The browser tests serve tests.support.asgi_routes.http_only too: a project whose ASGI
    # application mounts no websocket route.
    ASGI_APPLICATION = env("ASGI_APPLICATION", default="testproject.asgi.application")
    # REDIS_URL set: workers publish live progress through Redis (WORKQUEUE_REALTIME=
    # channel_layer); unset: an in-process layer, and the websockets follow the database.
    REDIS_URL = env("REDIS_URL", default="")
    # redis-py 8 reads with a 5 s socket timeout by default, as long as channels-redis blocks
    # waiting for a message: give the reads room, or every idle websocket drops (see
    # docs/guides/realtime.md).
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                    "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                               "prefix": env("CHANNELS_PREFIX", default="asgi")}}
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    }  # fmt: skip

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'demo.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000"
        ),
    }
    # Workers in threads and subprocesses must see the test database: a file, not :memory:.
    DATABASES["default"]["TEST"] = {
        "NAME": env("TEST_SQLITE_NAME", default=str(BASE_DIR / "test_db.sqlite3"))
    }
else:
    DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default=None)}
    # Through PgBouncer in transaction mode (tests/support/pgbouncer.py), as Django advises.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool(
        "DISABLE_SERVER_SIDE_CURSORS", default=False
    )

_REALTIME = env("WORKQUEUE_REALTIME", default="database")
WORKQUEUE = {
    # Comma-separated override; the claim-race test (tests/chaos) adds a fifth queue.
    "QUEUES": env.list("WORKQUEUE_QUEUES", default=["default", "mail", "reports", "low"]),
    "POLL_INTERVAL": env.float("WORKQUEUE_POLL_INTERVAL", default=0.5),
    "REAPER_INTERVAL": env.float("WORKQUEUE_REAPER_INTERVAL", default=1.0),
    "SCHEDULER_INTERVAL": env.float("WORKQUEUE_SCHEDULER_INTERVAL", default=1.0),
    # The acceptance tests' workers hand maintenance over within seconds (tests/support).
    "MAINTENANCE_LEASE_SECONDS": env.float("WORKQUEUE_MAINTENANCE_LEASE_SECONDS", default=60.0),
    # How many workers watch the maintainer on a connection of their own (PostgreSQL).
    "MAINTAINER_STANDBYS": env.int("WORKQUEUE_MAINTAINER_STANDBYS", default=2),
    "SHUTDOWN_GRACE_SECONDS": env.float("WORKQUEUE_GRACE", default=10.0),
    "LISTEN_NOTIFY": env.bool("WORKQUEUE_LISTEN_NOTIFY", default=True),
    # Set when DATABASE_URL goes through a pooler in transaction mode (tests/support/pgbouncer.py).
    "LISTEN_DSN": env("WORKQUEUE_LISTEN_DSN", default=None),
    "PREPARED_STATEMENTS": env.bool("WORKQUEUE_PREPARED_STATEMENTS", default=True),
    # Comma-separated; the bad-input tests name a module that fails to import.
    "TASK_MODULES": env.list("WORKQUEUE_TASK_MODULES", default=[]),
    # "database" (default), "channel_layer" (needs REDIS_URL across processes) or "off".
    "REALTIME": None if _REALTIME == "off" else _REALTIME,
    "REALTIME_POLL_INTERVAL": env.float("WORKQUEUE_REALTIME_POLL_INTERVAL", default=0.2),
    # Jobs claimed ahead per slot (the claim-ahead tests and the chaos case turn it on).
    "CLAIM_AHEAD": env.float("WORKQUEUE_CLAIM_AHEAD", default=0.0),
}

# Django 6's django.tasks on this engine (docs/guides/django-tasks.md); Django 5.2 has none.
if django.VERSION >= (6, 0):
    TASKS = {
        "default": {
            "BACKEND": "django_workqueue.backend.WorkqueueBackend",
            "QUEUES": ["default", "mail"],
            "OPTIONS": {
                "TASK_OPTIONS": {
                    # The crash test's task: a killed attempt is recovered within seconds.
                    "tests.support.django_tasks.die_once": {"lease_seconds": 2},
                    "tests.support.django_tasks.boom": {"max_attempts": 2, "backoff": 0},
                }
            },
        }
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_workqueue": {
            "handlers": ["console"],
            "level": env("WORKQUEUE_LOG_LEVEL", default="WARNING"),
        },
    },
}
