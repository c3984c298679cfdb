"""Run the local Step Functions and SQS emulator until Ctrl+C or SIGTERM (dev and tests).

The emulator (processes/emulator/) needs moto, which requirements-emulator.txt installs and
a production install leaves out, so it is imported only when the command runs.
"""

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.errors import ExternalServiceError
from processes import aws

# Top-level packages the emulator imports that only requirements-emulator.txt installs.
EMULATOR_PACKAGES = frozenset({"moto", "werkzeug"})


class Command(BaseCommand):
    help = (
        "Run the local Step Functions and SQS emulator (moto, ASL execution on) and "
        "create the intake queues in it. State is in memory: it is gone on exit. "
        "With -v 2 it also shows moto's own log (ASL interpreter errors)."
    )

    def handle(self, *args, verbosity: int, **options) -> None:
        if not settings.INBOX_EMULATOR:
            raise CommandError(
                "INBOX_EMULATOR is off: this deployment talks to real AWS, so the local "
                "emulator is not started. Unset INBOX_EMULATOR (or set it to true) to use it."
            )
        serve = _serve()
        from processes.emulator import EmulatorError

        if verbosity < 2:
            # moto logs every failed execution at ERROR with the whole state, parameters
            # included; DescribeExecution and the history already say why it failed.
            logging.getLogger("moto").setLevel(logging.CRITICAL)
        # The port comes from INBOX_EMULATOR_PORT alone: every process (web, workers,
        # tests) must agree on it, so there is no separate --port to drift from it.
        host, port = settings.INBOX_EMULATOR_HOST, settings.INBOX_EMULATOR_PORT
        endpoint = f"http://{host}:{port}"

        def on_ready() -> None:
            aws.intake_queues_ensure()
            aws.status_queue_ensure()
            self.stdout.write(
                f"Emulator ready at {endpoint} (intake queue {settings.INBOX_INTAKE_QUEUE}, "
                f"dead letters {settings.INBOX_INTAKE_DLQ}). Ctrl+C stops it."
            )
            # Whoever started this process waits for that line.
            self.stdout.flush()

        try:
            serve(host=host, port=port, on_ready=on_ready)
        except (EmulatorError, ExternalServiceError) as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write("Emulator stopped.")


def _serve() -> Callable[..., None]:
    """Import and return the emulator's serve; raise CommandError if moto is not installed."""
    try:
        from processes.emulator.server import serve
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EMULATOR_PACKAGES:
            raise
        raise CommandError(
            f"The local emulator needs moto, which is not installed here ({missing} is "
            "missing): production installs requirements.txt alone. Install the emulator's "
            "requirements with: pip install -r requirements-emulator.txt (./dev run and "
            "./dev test do it for you)."
        ) from exc
    return serve
