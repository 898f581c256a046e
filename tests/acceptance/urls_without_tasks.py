"""The URLs of ``settings_without_tasks``: the admin only (the demo's views import its tasks)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
