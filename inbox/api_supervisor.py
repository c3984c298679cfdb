"""REST API for supervisors: escalated and overdue tasks, and the actions on them."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api_auth import HasTokenScope
from accounts.models import ApiScope, User
from accounts.roles import Role
from accounts.selectors import user_roles
from inbox.api import TaskActionApi, TaskSerializer, action_api, task_data, valid_input
from inbox.board import supervised_tasks
from inbox.lifecycle import REASON_MAX_CHARS
from inbox.services import supervisor

BULK_MAX = 500


class IsSupervisor(BasePermission):
    message = "Only supervisors and admins manage tasks."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool({Role.SUPERVISOR, Role.ADMIN} & user_roles(user=request.user))


class ActionInput(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX_CHARS)
    version = serializers.IntegerField(required=False, min_value=1)


class WorkerField(serializers.EmailField):
    """A worker given by e-mail address: the active user of it; 400 naming the field if none.

    Invalid input, not a missing resource: the URL's task exists, the field names nobody.
    """

    def run_validation(self, data: Any = serializers.empty) -> User:
        email = super().run_validation(data)
        worker = User.objects.filter(email__iexact=email, is_active=True).first()
        if worker is None:
            raise serializers.ValidationError(f"No active user has the address {email}.")
        return worker


class ReassignInput(ActionInput):
    worker = WorkerField(help_text="The worker who gets the task.")


class ExtendInput(ActionInput):
    clock = serializers.ChoiceField(choices=supervisor.CLOCKS)
    seconds = serializers.IntegerField(min_value=1)


class SupervisorApi(APIView):
    """Base of the supervisor's API views: a supervisor; an API token needs scope supervise."""

    permission_classes = [IsAuthenticated, HasTokenScope, IsSupervisor]
    token_scope = ApiScope.SUPERVISE


class SupervisorActionApi(SupervisorApi, TaskActionApi):
    """A task action of the supervisor's: TaskActionApi's shape, SupervisorApi's checks."""

    input_class = ActionInput
    actor = "supervisor"


class SupervisedListApi(SupervisorApi):
    class FilterSerializer(serializers.Serializer):
        escalated = serializers.BooleanField(required=False, default=False)
        overdue = serializers.BooleanField(required=False, default=False)

        class Meta:
            ref_name = "SupervisedFilter"

    @extend_schema(parameters=[FilterSerializer], responses=TaskSerializer(many=True),
                   summary="Open tasks of my skills (escalated or overdue ones if asked)")
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        tasks = supervised_tasks(supervisor=request.user, **filters.validated_data)
        return Response([task_data(task) for task in tasks[:500]])


# The supervisor's actions: each the service it calls, its input and what it does.
ReassignApi = action_api("ReassignApi", supervisor.task_reassign, ReassignInput,
                         "Reassign a task", base=SupervisorActionApi)
ReturnApi = action_api("ReturnApi", supervisor.task_return, ActionInput, "Return to the queue",
                       base=SupervisorActionApi)
ExtendApi = action_api("ExtendApi", supervisor.task_extend, ExtendInput, "Extend a clock",
                       base=SupervisorActionApi)
AbortApi = action_api("AbortApi", supervisor.task_abort, ActionInput,
                      "Abort (Step Functions hears HumanTask.TimedOut)",
                      base=SupervisorActionApi)


class BulkApi(SupervisorApi):
    class InputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=["reassign", "return", "extend", "abort"])
        task_ids = serializers.ListField(child=serializers.UUIDField(), min_length=1,
                                         max_length=BULK_MAX)
        reason = serializers.CharField(max_length=REASON_MAX_CHARS)
        worker = WorkerField(required=False)
        clock = serializers.ChoiceField(choices=supervisor.CLOCKS, required=False)
        seconds = serializers.IntegerField(min_value=1, required=False)

        class Meta:
            ref_name = "BulkInput"

        def validate(self, data: dict[str, Any]) -> dict[str, Any]:
            needs = {"reassign": ["worker"], "extend": ["clock", "seconds"]}
            missing = [f for f in needs.get(data["action"], []) if f not in data]
            if missing:
                raise serializers.ValidationError(
                    {f: f"required for {data['action']}" for f in missing})
            return data

    class OutputSerializer(serializers.Serializer):
        outcomes = serializers.DictField(child=serializers.CharField(),
                                         help_text="Each task id: ok, or why not.")

        class Meta:
            ref_name = "BulkOutput"

    @extend_schema(request=InputSerializer, responses=OutputSerializer,
                   summary="Apply one action to many tasks (each on its own)")
    def post(self, request: Request) -> Response:
        data = valid_input(self.InputSerializer, request)
        action = data["action"]
        arguments: dict[str, Any] = {"reason": data["reason"]}
        if action == "reassign":
            arguments["worker"] = data["worker"]
        if action == "extend":
            arguments.update(clock=data["clock"], seconds=data["seconds"])
        function = {"reassign": supervisor.task_reassign, "return": supervisor.task_return,
                    "extend": supervisor.task_extend, "abort": supervisor.task_abort}
        outcomes = supervisor.tasks_bulk(supervisor=request.user, task_ids=data["task_ids"],
                                          action=function[action], **arguments)
        return Response({"outcomes": outcomes})
