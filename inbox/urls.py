from django.urls import path

from inbox import views, views_intake, views_live, views_supervisor

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
    path("live/", views_live.live_stream, name="live"),
    path("tasks/next/", views.take_next, name="take-next"),
    path("tasks/<uuid:task_id>/", views.task_detail, name="task"),
    path("tasks/<uuid:task_id>/complete/", views.task_complete_page, name="task-complete"),
    path("tasks/<uuid:task_id>/reject/", views.task_reject_page, name="task-reject"),
    path("tasks/<uuid:task_id>/release/", views.task_release_page, name="task-release"),
    path("tasks/<uuid:task_id>/claim/", views.task_claim_page, name="task-claim"),
    path("tasks/<uuid:task_id>/accept/", views.task_accept_page, name="task-accept"),
    path("tasks/<uuid:task_id>/decline/", views.task_decline_page, name="task-decline"),
    # The supervisor's pages.
    path("supervisor/", views_supervisor.supervisor_board, name="supervisor"),
    path("supervisor/bulk/", views_supervisor.tasks_bulk_page, name="supervisor-bulk"),
    path("tasks/<uuid:task_id>/reassign/", views_supervisor.task_reassign_page,
         name="task-reassign"),
    path("tasks/<uuid:task_id>/return/", views_supervisor.task_return_page, name="task-return"),
    path("tasks/<uuid:task_id>/extend/", views_supervisor.task_extend_page, name="task-extend"),
    path("tasks/<uuid:task_id>/abort/", views_supervisor.task_abort_page, name="task-abort"),
    path("tasks/<uuid:task_id>/timeline/", views_supervisor.task_timeline,
         name="task-timeline"),
    # The admins' intake pages, beside the other team pages (accounts.urls, processes).
    path("team/intake/", views_intake.intake_errors, name="intake-errors"),
    path("team/intake/redrive/", views_intake.intake_redrive_post, name="intake-redrive"),
]
