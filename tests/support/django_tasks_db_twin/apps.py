from django.apps import AppConfig


class DjangoTasksDbTwinConfig(AppConfig):
    name = "tests.support.django_tasks_db_twin"
    label = "django_tasks_database"  # django-tasks-db's own label: its table's name follows
    default_auto_field = "django.db.models.BigAutoField"
