"""django-tasks-db's ``DBTaskResult`` as its table stands (django-tasks-db 0.13, migration 0021):
the same app label, table and columns, so that ``workqueue import-django-tasks-db`` is tested
without installing django-tasks-db (which the test matrix's Django 5.2 envs cannot run)."""
