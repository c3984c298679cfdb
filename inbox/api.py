"""REST API for workers: queues, take next, one task, and every action on it.

One view per operation with nested serializers; every view reaches tasks through
inbox.selectors.access_task (or a service that calls it). No serializer has a token field.
"""

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inbox import dispatch, services
from inbox.models import Task
from inbox.selectors import access_task, my_queues, my_tasks, task_history


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.CharField(), required=False,
                                   help_text="Each bad field of an answer and what is wrong.")

    class Meta:
        ref_name = "InboxError"


class EventSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    action = serializers.CharField()
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    actor = serializers.CharField(source="actor_label")
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class TaskSerializer(serializers.Serializer):
    """A task as workers see it: never its token."""

    id = serializers.UUIDField()
    version = serializers.IntegerField()
    state = serializers.CharField()
    title = serializers.CharField()
    process = serializers.SerializerMethodField()
    stage = serializers.CharField()
    execution = serializers.CharField(source="execution_arn")
    skill = serializers.CharField(source="skill.slug")
    priority = serializers.IntegerField()
    assignee = serializers.EmailField(source="assignee.email", allow_null=True, default=None)
    clocks = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_process(self, task: Task) -> dict[str, Any]:
        return {"name": task.process_name, "version": task.process_version}

    def get_clocks(self, task: Task) -> dict[str, Any]:
        return {
            "entered_at": task.entered_at,
            "offer_deadline": task.offer_deadline,
            "work_deadline": task.work_deadline,
            "overall_deadline": task.overall_deadline,
        }


class TaskDetailSerializer(TaskSerializer):
    input = serializers.JSONField()
    answer = serializers.JSONField()
    reason = serializers.CharField()
    form = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()

    def get_form(self, task: Task) -> dict[str, Any]:
        return asdict(services.task_form(task=task))

    def get_history(self, task: Task) -> list[dict[str, Any]]:
        return EventSerializer(task_history(task=task), many=True).data


class VersionInput(serializers.Serializer):
    version = serializers.IntegerField(required=False, min_value=1,
                                       help_text="The task version you acted on (409 if stale).")


class _TaskApi(APIView):
    permission_classes = [IsAuthenticated]

    def respond(self, task: Task, code: int = status.HTTP_200_OK) -> Response:
        task = access_task(user=self.request.user, task_id=task.pk)
        return Response(TaskDetailSerializer(task).data, status=code)


class QueueListApi(APIView):
    permission_classes = [IsAuthenticated]

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "QueueListOutput"

        skill = serializers.CharField()
        name = serializers.CharField()
        dispatch = serializers.CharField()
        proficiency = serializers.IntegerField()
        waiting = serializers.IntegerField()
        oldest = serializers.DateTimeField(allow_null=True)

    @extend_schema(responses=OutputSerializer(many=True), summary="My queues")
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(my_queues(user=request.user), many=True).data)


class MyTaskListApi(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(responses=TaskSerializer(many=True), summary="Tasks I hold or am offered")
    def get(self, request: Request) -> Response:
        return Response(TaskSerializer(my_tasks(user=request.user), many=True).data)


class TakeNextApi(_TaskApi):
    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TakeNextInput"

        skill = serializers.CharField(required=False, help_text="Only this queue.")

    @extend_schema(request=InputSerializer, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Take the next task")
    def post(self, request: Request) -> Response:
        data = valid_input(self.InputSerializer, request)
        return self.respond(dispatch.task_take_next(worker=request.user, skill=data.get("skill")))


class TaskDetailApi(_TaskApi):
    @extend_schema(responses={200: TaskDetailSerializer, 404: ErrorSerializer},
                   summary="A task: input, form, clocks, history")
    def get(self, request: Request, task_id: str) -> Response:
        return Response(TaskDetailSerializer(access_task(user=request.user, task_id=task_id)).data)


class TaskClaimApi(_TaskApi):
    @extend_schema(request=VersionInput, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Claim a queued task")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(VersionInput, request)
        return self.respond(dispatch.task_claim(worker=request.user, task_id=task_id,
                                                expected_version=data.get("version")))


class TaskAcceptApi(_TaskApi):
    @extend_schema(request=VersionInput, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Accept an offer")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(VersionInput, request)
        return self.respond(dispatch.task_accept(worker=request.user, task_id=task_id,
                                                 expected_version=data.get("version")))


class ReasonInput(VersionInput):
    reason = serializers.CharField(max_length=2000, allow_blank=False)


class TaskDeclineApi(_TaskApi):
    @extend_schema(request=ReasonInput, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Decline an offer")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(ReasonInput, request)
        return self.respond(dispatch.task_decline(worker=request.user, task_id=task_id,
                                                  reason=data["reason"],
                                                  expected_version=data.get("version")))


class TaskReleaseApi(_TaskApi):
    class InputSerializer(VersionInput):
        class Meta:
            ref_name = "TaskReleaseInput"

        reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)

    @extend_schema(request=InputSerializer, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Release a held task")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(self.InputSerializer, request)
        return self.respond(dispatch.task_release(worker=request.user, task_id=task_id,
                                                  reason=data.get("reason", ""),
                                                  expected_version=data.get("version")))


class TaskCompleteApi(_TaskApi):
    class InputSerializer(VersionInput):
        class Meta:
            ref_name = "TaskCompleteInput"

        answer = serializers.JSONField(help_text="The form's fields and their values.")

    @extend_schema(request=InputSerializer, responses={200: TaskDetailSerializer,
                   400: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
                   summary="Complete a held task with an answer")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(self.InputSerializer, request)
        return self.respond(services.task_complete(worker=request.user, task_id=task_id,
                                                   answer=data["answer"],
                                                   expected_version=data.get("version")))


class TaskRejectApi(_TaskApi):
    @extend_schema(request=ReasonInput, responses={200: TaskDetailSerializer,
                   404: ErrorSerializer, 409: ErrorSerializer}, summary="Reject a held task")
    def post(self, request: Request, task_id: str) -> Response:
        data = valid_input(ReasonInput, request)
        return self.respond(services.task_reject(worker=request.user, task_id=task_id,
                                                 reason=data["reason"],
                                                 expected_version=data.get("version")))


def valid_input(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
