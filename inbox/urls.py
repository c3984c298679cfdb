from django.urls import path

from inbox import views

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
    path("tasks/next/", views.take_next, name="take-next"),
    path("tasks/<uuid:task_id>/", views.task_detail, name="task"),
    path("tasks/<uuid:task_id>/complete/", views.task_complete, name="task-complete"),
    path("tasks/<uuid:task_id>/reject/", views.task_reject, name="task-reject"),
    path("tasks/<uuid:task_id>/release/", views.task_release, name="task-release"),
    path("tasks/<uuid:task_id>/claim/", views.task_claim, name="task-claim"),
    path("tasks/<uuid:task_id>/accept/", views.task_accept, name="task-accept"),
    path("tasks/<uuid:task_id>/decline/", views.task_decline, name="task-decline"),
]
