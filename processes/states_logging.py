"""Where and how state machines log to CloudWatch Logs: one log group per process.

Both ways of deploying use it: process_deploy (the quick path of ./dev run and the tests)
and the CloudFormation template (processes/infra.py). Never with execution data: it holds
every human stage's task token (the TaskScheduled parameters).
"""

from typing import Any

LOG_GROUP_ROOT = "/aws/vendedlogs/states"


def log_group_name(*, prefix: str, process: str) -> str:
    """Return the log group of a process's state machines.

    Under /aws/vendedlogs/, as AWS advises for vended logs: Step Functions then keeps the
    account's CloudWatch Logs resource policy small.
    """
    return f"{LOG_GROUP_ROOT}/{prefix}-{process}"


def states_logging(*, log_group_arn: str, level: str) -> dict[str, Any]:
    """Return CreateStateMachine's loggingConfiguration: level, never execution data."""
    return {
        "level": level,
        "includeExecutionData": False,
        "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn": log_group_arn}}],
    }
