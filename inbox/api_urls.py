from django.urls import path

from inbox import api, api_migrations, api_supervisor

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
    path("tasks/<uuid:task_id>/undo/", api.TaskUndoApi.as_view(), name="api-task-undo"),
]

urlpatterns += [
    path("supervisor/tasks/", api_supervisor.SupervisedListApi.as_view(),
         name="api-supervised"),
    path("supervisor/tasks/bulk/", api_supervisor.BulkApi.as_view(), name="api-bulk"),
    path("supervisor/tasks/<uuid:task_id>/reassign/", api_supervisor.ReassignApi.as_view(),
         name="api-reassign"),
    path("supervisor/tasks/<uuid:task_id>/return/", api_supervisor.ReturnApi.as_view(),
         name="api-return"),
    path("supervisor/tasks/<uuid:task_id>/extend/", api_supervisor.ExtendApi.as_view(),
         name="api-extend"),
    path("supervisor/tasks/<uuid:task_id>/abort/", api_supervisor.AbortApi.as_view(),
         name="api-abort"),
    path("processes/<slug:name>/migrations/", api_migrations.MigrationsApi.as_view(),
         name="api-migrations"),
]
