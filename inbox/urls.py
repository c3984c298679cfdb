from django.urls import path

from inbox import views, views_executions, views_intake, views_live, views_supervisor

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
    path("live/", views_live.live_stream, name="live"),
    path("tasks/next/", views.take_next, name="take-next"),
    path("tasks/<uuid:task_id>/", views.task_detail, name="task"),
    # A task's actions: POST /tasks/<id>/<action>/, named task-<action>.
    *(path(f"tasks/<uuid:task_id>/{action}/", view, name=f"task-{action}")
      for action, view in [
          ("complete", views.task_complete_page), ("reject", views.task_reject_page),
          ("release", views.task_release_page), ("claim", views.task_claim_page),
          ("accept", views.task_accept_page), ("decline", views.task_decline_page),
          ("undo", views.task_undo_page),
          ("reassign", views_supervisor.task_reassign_page),
          ("return", views_supervisor.task_return_page),
          ("extend", views_supervisor.task_extend_page),
          ("abort", views_supervisor.task_abort_page),
      ]),
    # The supervisor's pages.
    path("supervisor/", views_supervisor.supervisor_board, name="supervisor"),
    path("supervisor/bulk/", views_supervisor.tasks_bulk_page, name="supervisor-bulk"),
    path("tasks/<uuid:task_id>/timeline/", views_supervisor.task_timeline,
         name="task-timeline"),
    path("supervisor/executions/", views_executions.execution_list, name="executions"),
    path("supervisor/executions/<int:execution_id>/", views_executions.execution_detail,
         name="execution"),
    path("supervisor/executions/<int:execution_id>/timeline/",
         views_executions.execution_timeline, name="execution-timeline"),
    # The admins' intake pages, beside the other team pages (accounts.urls, processes).
    path("team/intake/", views_intake.intake_errors, name="intake-errors"),
    path("team/intake/redrive/", views_intake.intake_redrive_post, name="intake-redrive"),
]
