from django.urls import path

from accounts import views

app_name = "team"

urlpatterns = [
    path("skills/", views.skills, name="skills"),
    path("skills/<int:worker_id>/", views.worker_save, name="worker-save"),
]

urlpatterns += [
    path("audit/", views.audit_log, name="audit"),
]
