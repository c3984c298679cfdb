from django.urls import path

from inbox import views

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
]
