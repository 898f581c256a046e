from django.contrib import admin
from django.urls import include, path

from django_workqueue import views as workqueue_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workqueue/metrics", workqueue_views.metrics),
    path("demo/", include("testproject.demo.urls")),  # the live progress page
]
