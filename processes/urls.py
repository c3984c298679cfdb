from django.urls import path

from processes import api

app_name = "processes"

urlpatterns = [
    path("", api.ProcessListApi.as_view(), name="list"),
    path("deploy/", api.ProcessDeployApi.as_view(), name="deploy"),
    path("<slug:name>/executions/", api.ExecutionsApi.as_view(), name="executions"),
]
