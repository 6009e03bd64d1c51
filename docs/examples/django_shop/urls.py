from django.urls import path

from . import views

urlpatterns = [
    path("sums/", views.enqueue_sum),
    path("sums/<str:job_id>/", views.sum_result),
]
