"""A URLconf whose views' module defines a ``django.tasks`` task (Django 6+)."""

from django.urls import path

from tests.support.django_task_views import greet_view

urlpatterns = [path("greet/", greet_view)]
