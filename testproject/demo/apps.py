from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo: its tasks are in ``tasks.py``; ``python manage.py demo`` runs them."""

    name = "testproject.demo"
    label = "demo"
    verbose_name = "django-workqueue demo"
