from django.urls import path

from testproject.demo import views

urlpatterns = [
    path("progress/", views.start, name="demo-start"),
    path("progress/<int:job_id>/", views.progress, name="demo-progress"),
    path("receipts/", views.receipt, name="demo-receipt"),
]
