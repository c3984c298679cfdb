"""Create the SQS intake queue, the execution-status queue and rule where the settings point."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.errors import ExternalServiceError
from processes import aws


class Command(BaseCommand):
    help = (
        "Create (or bring up to date) the SQS intake queue and its dead-letter queue, and "
        "the EventBridge rule that sends execution status changes to the status queue (with "
        "its own dead-letter queue), in the emulator or in real AWS, as the settings say, "
        "and print them. Idempotent."
    )

    def handle(self, *args, **options) -> None:
        target = (
            f"the local emulator at {settings.AWS_ENDPOINT_URL}"
            if settings.INBOX_EMULATOR
            else f"AWS region {settings.AWS_REGION}"
        )
        try:
            queues = aws.intake_queues_ensure()
            attributes = aws.queue_attributes(url=queues["queue_url"])
            status = aws.status_queue_ensure()
        except ExternalServiceError as exc:
            hint = (
                " Is the emulator running (python manage.py emulator)?"
                if settings.INBOX_EMULATOR and exc.retryable
                else ""
            )
            raise CommandError(f"Bootstrap against {target} failed: {exc.message}.{hint}") from exc
        redrive = json.loads(attributes.get("RedrivePolicy", "{}"))
        self.stdout.write(f"Queues in {target}:")
        self.stdout.write(f"  intake       {queues['queue_url']}")
        self.stdout.write(f"               {queues['queue_arn']}")
        self.stdout.write(f"  dead letters {queues['dlq_url']}")
        self.stdout.write(f"               {queues['dlq_arn']}")
        self.stdout.write(
            f"  redrive after {redrive.get('maxReceiveCount')} receives; visibility timeout "
            f"{attributes.get('VisibilityTimeout')} s; long poll "
            f"{attributes.get('ReceiveMessageWaitTimeSeconds')} s"
        )
        self.stdout.write(f"  status       {status['queue_url']}")
        self.stdout.write(f"               {status['queue_arn']}")
        self.stdout.write(f"  status dead letters {status['dlq_url']}")
        self.stdout.write(f"  status rule  {status['rule_arn']} (ended executions, default bus)")
