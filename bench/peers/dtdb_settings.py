"""Django settings for django-tasks-db (the database backend of django-tasks).

Persistent connections (CONN_MAX_AGE=None): db_worker calls close_old_connections() around
every task, which would otherwise reconnect for each one.
"""

import environ

env = environ.Env()

SECRET_KEY = "bench-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
DATABASES = {"default": {**env.db("DATABASE_URL"), "CONN_MAX_AGE": None}}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
