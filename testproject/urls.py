from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from django_workqueue import views as workqueue_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workqueue/metrics", workqueue_views.metrics),
    path("demo/", include("testproject.demo.urls")),  # the live progress page
]

if settings.HAS_API:  # the optional extra: the project runs without DRF (tox env base)
    urlpatterns.append(path("api/workqueue/", include("django_workqueue.api.urls")))
