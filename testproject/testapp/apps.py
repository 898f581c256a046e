from django.apps import AppConfig


class TestappConfig(AppConfig):
    name = "testproject.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"
