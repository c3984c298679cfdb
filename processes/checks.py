"""Deployment checks for the processes room."""

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.security, deploy=True)
def check_emulator_in_production(app_configs: object, **kwargs: object) -> list[CheckMessage]:
    """Warn when a production deployment would talk to the local emulator."""
    if settings.INBOX_EMULATOR and not settings.DEBUG:
        return [
            Warning(
                "INBOX_EMULATOR is on: Step Functions and SQS calls go to the local "
                f"emulator at {settings.AWS_ENDPOINT_URL}, not to AWS.",
                hint="Set INBOX_EMULATOR=false and AWS_REGION for a real deployment.",
                id="processes.W001",
            )
        ]
    return []
