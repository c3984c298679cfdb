"""State machines deployed by process_deploy log to their process's log group, no data."""

import boto3
import pytest
from django.conf import settings

from processes import aws
from processes.services import process_deploy
from tests.processes.lifecycle import succeed_spec, unique_name

pytestmark = [pytest.mark.emulator, pytest.mark.django_db]
ACCOUNT = "123456789012"


def _log_groups(prefix: str) -> list[tuple[str, int]]:
    logs = boto3.client("logs", endpoint_url=settings.AWS_ENDPOINT_URL,
                        region_name=settings.AWS_REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")
    return [(g["logGroupName"], g.get("retentionInDays"))
            for g in logs.describe_log_groups(logGroupNamePrefix=prefix)["logGroups"]]


def test_a_quick_deploy_gives_the_state_machine_its_log_group_and_logging(private_intake,
                                                                         settings):
    """./dev run's path (process_deploy creating the machine) logs as the template does."""
    settings.INBOX_STATES_LOG_RETENTION_DAYS = 30
    name = unique_name("logged")
    version, _ = process_deploy(text=succeed_spec(name=name), source="quick")
    described = aws.state_machine_describe(state_machine_arn=version.state_machine_arn)
    group = f"/aws/vendedlogs/states/{settings.INBOX_INFRA_PREFIX}-{name}"
    assert described["loggingConfiguration"] == {
        "level": "ERROR", "includeExecutionData": False,
        "destinations": [{"cloudWatchLogsLogGroup": {
            "logGroupArn": f"arn:aws:logs:{settings.AWS_REGION}:{ACCOUNT}:log-group:{group}:*"}}],
    }
    assert _log_groups(group) == [(group, 30)]
    # Deploying it again (the emulator forgot it, or a level was raised) keeps it logging.
    settings.INBOX_STATES_LOG_LEVEL = "ALL"
    process_deploy(text=succeed_spec(name=name), source="quick")
    again = aws.state_machine_describe(state_machine_arn=version.state_machine_arn)
    assert again["loggingConfiguration"]["level"] == "ALL"
    assert again["loggingConfiguration"]["includeExecutionData"] is False
