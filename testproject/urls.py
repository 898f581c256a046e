from django.contrib import admin
from django.urls import path

from django_workqueue import views as workqueue_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workqueue/metrics", workqueue_views.metrics),
]
