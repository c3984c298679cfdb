"""Stop an execution in Step Functions (or the emulator), as StopExecution does."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import ExternalServiceError
from processes import aws


class Command(BaseCommand):
    help = (
        "Stop a running execution (StopExecution) with an error and a cause. Its open tasks "
        "are cancelled when the status change event reaches the inbox (within a second with "
        "the clock process running), or by the DescribeExecution backstop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("execution_arn", help="the execution's ARN (on its task's page)")
        parser.add_argument("--error", default="Ops.Stopped", help="error name to record")
        parser.add_argument("--cause", default="Stopped by an operator.", help="why")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            aws.execution_stop(execution_arn=options["execution_arn"], error=options["error"],
                               cause=options["cause"])
        except ExternalServiceError as exc:
            raise CommandError(f"Not stopped: {exc.message}") from None
        self.stdout.write(f"Stopped {options['execution_arn']}.")
