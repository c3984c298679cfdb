"""REST API for admins: migrate executions waiting at a human stage to a newer version."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api_auth import HasTokenScope
from accounts.models import ApiScope
from inbox.lifecycle import REASON_MAX_CHARS
from inbox.services.migration import migrations_start
from processes.api import IsAdminRole


class _ResultSerializer(serializers.Serializer):
    task_id = serializers.UUIDField()
    execution_arn = serializers.CharField()
    stage = serializers.CharField()
    outcome = serializers.ChoiceField(
        choices=["requested", "already", "planned", "refused"])
    status = serializers.CharField(help_text="How far an earlier migration of the task is.")
    detail = serializers.CharField(help_text="Why it was refused or failed.")
    to_execution_arn = serializers.CharField()

    class Meta:
        ref_name = "MigrationResult"


class MigrationsApi(APIView):
    """Migrate the open tasks of one process version to a newer version at the same stage."""

    permission_classes = [IsAuthenticated, HasTokenScope, IsAdminRole]
    token_scope = ApiScope.ADMIN

    class InputSerializer(serializers.Serializer):
        from_version = serializers.IntegerField(min_value=1)
        to_version = serializers.IntegerField(min_value=1)
        reason = serializers.CharField(max_length=REASON_MAX_CHARS)
        stage = serializers.CharField(required=False, max_length=80)
        task_ids = serializers.ListField(child=serializers.UUIDField(), required=False,
                                         max_length=1000)
        dry_run = serializers.BooleanField(default=False)

        class Meta:
            ref_name = "MigrationsInput"

    @extend_schema(
        operation_id="processes_migrate",
        description="Move each execution of from_version waiting at a human stage (an open "
        "task) to to_version at the same stage. Each migration is recorded and begun by the "
        "worker (outcome requested): the new version starts there with the carried state, "
        "the task moves to its token when its envelope arrives, and the old execution is "
        "stopped. Asking again is harmless (outcome already, with the status it reached: "
        "starting, started, moved, done, superseded or refused, and the detail of a "
        "refusal). A task whose stage cannot move is refused, with the reason. 403 unless "
        "the caller is an admin.",
        request=InputSerializer,
        responses={200: _ResultSerializer(many=True)},
    )
    def post(self, request: Request, name: str) -> Response:
        given = self.InputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        results = migrations_start(
            actor=request.user, process_name=name, from_version=data["from_version"],
            to_version=data["to_version"], reason=data["reason"], stage=data.get("stage"),
            task_ids=[str(i) for i in data["task_ids"]] if "task_ids" in data else None,
            dry_run=data["dry_run"])
        return Response(_ResultSerializer([asdict(r) for r in results], many=True).data)
