"""REST API for admins: list processes, deploy specs, start and list executions.

One view per operation, each with its own nested serializers; the services do the work.
"""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api_auth import HasTokenScope
from accounts.models import ApiScope
from accounts.roles import Role
from accounts.selectors import user_has_role
from processes.selectors import execution_list, process_get, process_list
from processes.services import BUSINESS_KEY_MAX, process_deploy, process_start

# A spec is a few kilobytes; this only keeps a runaway request out of the parser.
SPEC_MAX_CHARS = 200_000


class IsAdminRole(BasePermission):
    """Allow users who hold the admin role."""

    message = "Only admins manage processes."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return user_has_role(user=request.user, role=Role.ADMIN)


class ExecutionPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


class _AdminApi(APIView):
    permission_classes = [IsAuthenticated, HasTokenScope, IsAdminRole]
    token_scope = ApiScope.ADMIN


class _ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
    problems = serializers.ListField(child=serializers.CharField(), required=False)

    class Meta:
        ref_name = "Error"


class _ExecutionSerializer(serializers.Serializer):
    process = serializers.CharField(source="process.name")
    version = serializers.IntegerField(source="version.version")
    business_key = serializers.CharField()
    name = serializers.CharField()
    execution_arn = serializers.CharField()
    status = serializers.CharField()
    input = serializers.JSONField()
    output = serializers.JSONField(allow_null=True)
    error = serializers.CharField()
    cause = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    checked_at = serializers.DateTimeField(allow_null=True)
    started_by = serializers.EmailField(source="started_by.email", allow_null=True, default=None)


class ProcessListApi(_AdminApi):
    """List every process with its deployed versions, newest version first."""

    class OutputSerializer(serializers.Serializer):
        class VersionSerializer(serializers.Serializer):
            version = serializers.IntegerField()
            description = serializers.CharField()
            spec_sha256 = serializers.CharField()
            state_machine_name = serializers.CharField()
            state_machine_arn = serializers.CharField()
            deployed_by = serializers.EmailField(
                source="deployed_by.email", allow_null=True, default=None
            )
            deployed_at = serializers.DateTimeField()

            class Meta:
                ref_name = "ProcessVersion"

        name = serializers.CharField()
        created_at = serializers.DateTimeField()
        versions = VersionSerializer(many=True)

        class Meta:
            ref_name = "Process"

    @extend_schema(
        operation_id="processes_list",
        description="List every process with its deployed versions, newest version first.",
        responses=OutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        data = self.OutputSerializer(process_list(), many=True).data
        return Response(data)


class ProcessDeployApi(_AdminApi):
    """Deploy a YAML spec as a new version; 201 when created, 200 when already deployed."""

    class InputSerializer(serializers.Serializer):
        spec = serializers.CharField(max_length=SPEC_MAX_CHARS, trim_whitespace=False)

        class Meta:
            ref_name = "ProcessDeployInput"

    class OutputSerializer(serializers.Serializer):
        process = serializers.CharField(source="process.name")
        version = serializers.IntegerField()
        created = serializers.BooleanField()
        description = serializers.CharField()
        spec_sha256 = serializers.CharField()
        state_machine_arn = serializers.CharField()
        deployed_at = serializers.DateTimeField()

        class Meta:
            ref_name = "ProcessDeployOutput"

    @extend_schema(
        operation_id="processes_deploy",
        description="Deploy a YAML spec as a new version: 201 when created, 200 when that "
        "version is already deployed with the same text. 400 lists every problem of an "
        "invalid spec; 409 when the version exists with other text, is below the latest, "
        "or starts a child process that is not deployed.",
        request=InputSerializer,
        responses={
            201: OutputSerializer,
            200: OutputSerializer,
            400: _ErrorSerializer,
            409: _ErrorSerializer,
            502: _ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version, created = process_deploy(
            text=serializer.validated_data["spec"], source="spec", user=request.user
        )
        version.created = created
        return Response(
            self.OutputSerializer(version).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ExecutionListApi(_AdminApi):
    """List a process's executions, newest first, a page at a time."""

    pagination_class = ExecutionPagination

    class OutputSerializer(_ExecutionSerializer):
        class Meta:
            ref_name = "Execution"

    @extend_schema(
        operation_id="processes_executions_list",
        description="List the process's executions, newest first, a page at a time.",
        responses={200: OutputSerializer(many=True), 404: _ErrorSerializer},
    )
    def get(self, request: Request, name: str) -> Response:
        executions = execution_list(process=process_get(name=name))
        return _paginated(
            request=request,
            view=self,
            queryset=executions,
            serializer_class=ExecutionListApi.OutputSerializer,
        )


class ExecutionStartApi(_AdminApi):
    """Start a process for a business key; 201 when started, 200 when the key already was."""

    class InputSerializer(serializers.Serializer):
        input = serializers.JSONField(default=dict)
        business_key = serializers.CharField(max_length=BUSINESS_KEY_MAX, trim_whitespace=False)
        version = serializers.IntegerField(min_value=1, required=False, allow_null=True)

        class Meta:
            ref_name = "ExecutionStartInput"

    class OutputSerializer(_ExecutionSerializer):
        created = serializers.BooleanField()

        class Meta:
            ref_name = "ExecutionStartOutput"

    @extend_schema(
        operation_id="processes_executions_start",
        description="Start the process for a business key (the latest version unless "
        "given): 201 when started, 200 when the key already started it with the same "
        "input. 409 when the key was used with other input or another version.",
        request=InputSerializer,
        responses={
            201: OutputSerializer,
            200: OutputSerializer,
            400: _ErrorSerializer,
            404: _ErrorSerializer,
            409: _ErrorSerializer,
            502: _ErrorSerializer,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        serializer = ExecutionStartApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        execution, created = process_start(
            name=name,
            input=data["input"],
            business_key=data["business_key"],
            version=data.get("version"),
            user=request.user,
        )
        execution.created = created
        return Response(
            ExecutionStartApi.OutputSerializer(execution).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ExecutionsApi(ExecutionListApi, ExecutionStartApi):
    """One URL, two operations: GET is ExecutionListApi's, POST is ExecutionStartApi's."""


def _paginated(
    *,
    request: Request,
    view: APIView,
    queryset: QuerySet,
    serializer_class: type[serializers.Serializer],
) -> Response:
    paginator = ExecutionPagination()
    page: Any = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
