"""URLs of the processes' pages (the API's are in processes/urls.py)."""

from django.urls import path

from processes import views

app_name = "process-pages"

urlpatterns = [
    path("", views.process_list_page, name="list"),
]
