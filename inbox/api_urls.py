from django.urls import path

from inbox import api

urlpatterns = [
    path("queues/", api.QueueListApi.as_view(), name="api-queues"),
    path("tasks/mine/", api.MyTaskListApi.as_view(), name="api-my-tasks"),
    path("tasks/next/", api.TakeNextApi.as_view(), name="api-take-next"),
    path("tasks/<uuid:task_id>/", api.TaskDetailApi.as_view(), name="api-task"),
    path("tasks/<uuid:task_id>/claim/", api.TaskClaimApi.as_view(), name="api-task-claim"),
    path("tasks/<uuid:task_id>/accept/", api.TaskAcceptApi.as_view(), name="api-task-accept"),
    path("tasks/<uuid:task_id>/decline/", api.TaskDeclineApi.as_view(), name="api-task-decline"),
    path("tasks/<uuid:task_id>/release/", api.TaskReleaseApi.as_view(), name="api-task-release"),
    path("tasks/<uuid:task_id>/complete/", api.TaskCompleteApi.as_view(),
         name="api-task-complete"),
    path("tasks/<uuid:task_id>/reject/", api.TaskRejectApi.as_view(), name="api-task-reject"),
]
