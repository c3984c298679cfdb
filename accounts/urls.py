from django.urls import path

from accounts import views, views_presence, views_tokens

app_name = "team"

urlpatterns = [
    path("skills/", views.skills, name="skills"),
    path("skills/<int:worker_id>/", views.worker_save, name="worker-save"),
    # A worker's own availability (the header's control).
    path("presence/", views_presence.presence_set, name="presence"),
    path("skills/grant/", views.bulk_grant, name="bulk-grant"),
    path("skills/settings/", views.skill_list, name="skill-list"),
    path("skills/settings/new/", views.skill_create, name="skill-create"),
    path("skills/settings/<slug:slug>/edit/", views.skill_edit, name="skill-edit"),
    # Every signed-in user's own API tokens (admins also make them for others).
    path("tokens/", views_tokens.tokens, name="tokens"),
    path("tokens/new/", views_tokens.token_create, name="token-create"),
    path("tokens/for-user/", views_tokens.token_create_for, name="token-create-for"),
    path("tokens/<int:token_id>/revoke/", views_tokens.token_revoke, name="token-revoke"),
]

urlpatterns += [
    path("audit/", views.audit_log, name="audit"),
]
