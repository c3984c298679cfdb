"""REST API for workers: queues, take next, one task, and every action on it.

One view per operation; the actions share one shape (TaskActionApi: validate the input,
call one service, answer the task as it is now), so each action's class holds only its
input and its service call. Every view reaches tasks through inbox.selectors.access_task
or a service that calls it. No serializer has a token field.
"""

import datetime
import functools
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from accounts.api_auth import HasTokenScope
from accounts.models import ApiScope
from config.errors import InboxError
from inbox.display import in_order
from inbox.lifecycle import REASON_MAX_CHARS
from inbox.models import Task
from inbox.refusals import refusal_record
from inbox.selectors import access_task, my_queues, my_tasks, task_form, task_history
from inbox.services import worker
from processes.forms import Form


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
    input = serializers.SerializerMethodField()
    answer = serializers.JSONField()
    reason = serializers.CharField()
    form = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_input(self, task: Task) -> Any:
        """The input in the order its keys arrived (PostgreSQL's jsonb sorts them)."""
        return in_order(task.input, task.input_order)

    def get_form(self, task: Task) -> dict[str, Any]:
        return asdict(task_form(task=task))

    def get_history(self, task: Task) -> list[dict[str, Any]]:
        return EventSerializer(task_history(task=task), many=True).data


# The hot answers as plain dicts: the serializers above describe them (the OpenAPI schema)
# and a test checks both give the same JSON; building these costs a fraction of DRF's
# field-by-field serialization (docs/DECISIONS.md).
_drf_when = serializers.DateTimeField().to_representation


def _when(value: datetime.datetime) -> str:
    """value as DRF's DateTimeField shows it: ISO 8601 in the current time zone, UTC as Z.

    Its to_representation without its per-value settings lookups and calls, for the half
    dozen moments each answer holds (a naive value, which the database never gives, goes
    to DRF's own). tests/inbox/test_api.py compares the two.
    """
    if value.tzinfo is None:
        return _drf_when(value)
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def task_data(task: Task) -> dict[str, Any]:
    """Return the task as TaskSerializer shows it."""
    return {
        "id": str(task.pk),
        "version": task.version,
        "state": task.state,
        "title": task.title,
        "process": {"name": task.process_name, "version": task.process_version},
        "stage": task.stage,
        "execution": task.execution_arn,
        "skill": task.skill.slug,
        "priority": task.priority,
        "assignee": task.assignee.email if task.assignee_id is not None else None,
        "clocks": {
            "entered_at": _maybe_when(task.entered_at),
            "offer_deadline": _maybe_when(task.offer_deadline),
            "work_deadline": _maybe_when(task.work_deadline),
            "overall_deadline": _maybe_when(task.overall_deadline),
        },
        "created_at": _maybe_when(task.created_at),
    }


def task_detail_data(task: Task) -> dict[str, Any]:
    """Return the task as TaskDetailSerializer shows it: with input, form and history."""
    return {
        **task_data(task),
        "input": in_order(task.input, task.input_order),
        "answer": task.answer,
        "reason": task.reason,
        "form": _form_data(task_form(task=task)),
        "history": [
            {"version": event.version, "action": event.action,
             "from_state": event.from_state, "to_state": event.to_state,
             "actor": event.actor_label, "reason": event.reason, "at": _when(event.at)}
            for event in task_history(task=task)
        ],
    }


def _maybe_when(value: Any) -> str | None:
    return _when(value) if value is not None else None


@functools.lru_cache(maxsize=256)
def _form_data(form: Form) -> dict[str, Any]:
    # Forms are frozen: each one's JSON is made once (the answers never change it).
    return asdict(form)


class VersionInput(serializers.Serializer):
    version = serializers.IntegerField(required=False, min_value=1,
                                       help_text="The task version you acted on (409 if stale).")


class ReasonInput(VersionInput):
    reason = serializers.CharField(max_length=REASON_MAX_CHARS, allow_blank=False)


def valid_input(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Return request.data validated by serializer_class; 400 (ValidationError) if not valid.

    One instance per class validates every request: is_valid on a new one runs the same
    run_validation, after deep-copying the class's fields, which was 5 % of the web's CPU
    under the HTTP take (docs/BENCHMARKS.md, "An HTTP take's instructions"). run_validation
    keeps nothing on the instance.
    """
    try:
        return dict(_validator(serializer_class).run_validation(request.data))
    except serializers.ValidationError as exc:
        if isinstance(exc.detail, list) and exc.get_codes() == ["null"]:
            # A body of null: is_valid words it so (Serializer.errors), not as a field's null.
            raise serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [
                exceptions.ErrorDetail("No data provided", code="null")]}) from exc
        raise


@functools.cache
def _validator(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    # Shared by every request and thread: an input serializer has no context or instance, and
    # its fields, bound once here, hold only their declared options.
    validator = serializer_class()
    validator.fields  # noqa: B018 (binds the fields now, not in two threads at once)
    return validator




class WorkerApi(APIView):
    """Base of the worker's API views: signed in; an API token needs scope work (read: GETs)."""

    permission_classes = [IsAuthenticated, HasTokenScope]
    token_scope = ApiScope.WORK


class TaskActionApi(WorkerApi):
    """POST one action on a task: validate input_class, call service, answer the task.

    The service is called with the user as its actor (the keyword named by actor), the
    task's id from the URL, the input's fields by name, and "version" as expected_version.
    """

    input_class: type[serializers.Serializer] = VersionInput
    service: Callable[..., Task]
    actor = "worker"

    def handle_exception(self, exc: Exception) -> Response:
        """Answer exc as every view does, after auditing a 403 or 409 (inbox.refusals)."""
        status = (exc.status if isinstance(exc, InboxError)
                  else 403 if isinstance(exc, exceptions.PermissionDenied) else None)
        if status is not None:
            refusal_record(request=self.request, user=self.request.user,
                           task_id=self.kwargs.get("task_id"), status=status,
                           reason=exc.message if isinstance(exc, InboxError)
                           else str(exc.detail))
        return super().handle_exception(exc)

    def post(self, request: Request, task_id: str | None = None) -> Response:
        arguments = {self.actor: request.user, **valid_input(self.input_class, request)}
        if "version" in arguments:
            arguments["expected_version"] = arguments.pop("version")
        if task_id is not None:
            arguments["task_id"] = task_id
        then = arguments.pop("then", None)
        task = self.service(**arguments)
        # The service read the task through access_task: answer the row it changed.
        answer = task_detail_data(task)
        if then == "next":
            answer.update(_next_data(request.user, task))
        return Response(answer)


def _next_data(user: Any, decided: Task) -> dict[str, Any]:
    """The next task, taken after a decision that asked for it (then=next), as the page's
    "Complete and next" takes it: the decision is committed whatever the take finds. A
    retried decision answers what its first request took (task_take_next_after)."""
    try:
        taken = worker.task_take_next_after(worker=user, decided=decided, history=True)
        return {"next": task_detail_data(taken)}
    except InboxError as exc:  # Nothing waits, at capacity...: the decision stands.
        return {"next": None, "next_detail": exc.message}


class QueueListApi(WorkerApi):
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


class MyTaskListApi(WorkerApi):
    @extend_schema(responses=TaskSerializer(many=True), summary="Tasks I hold or am offered")
    def get(self, request: Request) -> Response:
        return Response([task_data(task) for task in my_tasks(user=request.user)])


class TaskDetailApi(WorkerApi):
    @extend_schema(responses={200: TaskDetailSerializer, 404: ErrorSerializer},
                   summary="A task: input, form, clocks, history")
    def get(self, request: Request, task_id: str) -> Response:
        return Response(task_detail_data(access_task(user=request.user, task_id=task_id,
                                                     history=True)))


class TakeNextInput(serializers.Serializer):
    skill = serializers.CharField(required=False, help_text="Only this queue.")


class TaskReleaseInput(VersionInput):
    reason = serializers.CharField(max_length=REASON_MAX_CHARS, required=False, allow_blank=True)


THEN_HELP = ('"next": then take the next task of my pull queues, in the same request (as '
             'the page\'s "Complete and next" does); the answer holds it as "next".')


class TaskCompleteInput(VersionInput):
    answer = serializers.JSONField(help_text="The form's fields and their values.")
    then = serializers.ChoiceField(choices=["next"], required=False, help_text=THEN_HELP)


class TaskRejectInput(ReasonInput):
    then = serializers.ChoiceField(choices=["next"], required=False, help_text=THEN_HELP)


class TaskDecisionSerializer(TaskDetailSerializer):
    """A decision's answer: the task decided, and with then=next, the next task."""

    next = TaskDetailSerializer(
        required=False, allow_null=True,
        help_text='With then=next: the task taken next; null when none could be taken.')
    next_detail = serializers.CharField(
        required=False, help_text="With then=next and no next task: why none was taken.")

    class Meta:
        ref_name = "TaskDecision"


def action_api(name: str, service: Callable[..., Task], input_class: type[serializers.Serializer],
               summary: str, *, errors: tuple[int, ...] = (404, 409),
               base: type[TaskActionApi] = TaskActionApi,
               answer: type[serializers.Serializer] = TaskDetailSerializer
               ) -> type[TaskActionApi]:
    """Return the API view class of one task action, described in the OpenAPI schema."""
    view = type(name, (base,), {"service": staticmethod(service), "input_class": input_class,
                                "__module__": __name__, "__doc__": summary})
    responses = {200: answer, **dict.fromkeys(errors, ErrorSerializer)}
    return extend_schema(request=input_class, responses=responses, summary=summary)(view)


# The worker's actions: each the service it calls, its input and what it does.
TakeNextApi = action_api("TakeNextApi", worker.task_take_next_shown, TakeNextInput,
                         "Take the next task")
TaskClaimApi = action_api("TaskClaimApi", worker.task_claim, VersionInput, "Claim a queued task")
TaskAcceptApi = action_api("TaskAcceptApi", worker.task_accept, VersionInput, "Accept an offer")
TaskDeclineApi = action_api("TaskDeclineApi", worker.task_decline, ReasonInput,
                            "Decline an offer")
TaskReleaseApi = action_api("TaskReleaseApi", worker.task_release, TaskReleaseInput,
                            "Release a held task")
TaskCompleteApi = action_api("TaskCompleteApi", worker.task_complete_shown, TaskCompleteInput,
                             "Complete a held task with an answer (and take the next)",
                             errors=(400, 404, 409), answer=TaskDecisionSerializer)
TaskRejectApi = action_api("TaskRejectApi", worker.task_reject_shown, TaskRejectInput,
                           "Reject a held task (and take the next)",
                           answer=TaskDecisionSerializer)
TaskUndoApi = action_api(
    "TaskUndoApi", worker.task_undo, VersionInput,
    "Undo my complete or reject within INBOX_UNDO_SECONDS (before it is sent)")
