"""Run the intake consumer in the foreground, for debugging (Celery beat runs it normally)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import ExternalServiceError
from inbox.services.admin import intake_redrive
from inbox.services.intake import intake_poll


class Command(BaseCommand):
    help = (
        "Long-poll the SQS intake queue and turn its messages into tasks, printing the "
        "counts of each poll, until Ctrl-C. --once polls once; --redrive N first moves up "
        "to N messages from the dead-letter queue back to the intake queue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Poll once, then stop.")
        parser.add_argument("--wait", type=int, default=20, help="Long-poll seconds (0-20).")
        parser.add_argument("--budget", type=float, default=25, help="Seconds per poll.")
        parser.add_argument(
            "--redrive", type=int, default=0, metavar="N",
            help="Move up to N dead letters back to the intake queue before polling.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 <= options["wait"] <= 20:
            raise CommandError("--wait must be between 0 and 20 seconds (the SQS limit).")
        try:
            if options["redrive"]:
                moved = intake_redrive(max_messages=options["redrive"])
                self.stdout.write(f"Moved {moved} dead letter(s) back to the intake queue.")
            while True:
                counts = intake_poll(wait_seconds=options["wait"], budget_seconds=options["budget"])
                if any(counts.values()) or options["once"]:
                    self.stdout.write(", ".join(f"{o} {n}" for o, n in counts.items()))
                if options["once"]:
                    return
        except ExternalServiceError as exc:
            raise CommandError(exc.message) from None
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")
