"""Start an execution of a deployed process for a business key (starting twice starts once)."""

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import InboxError
from processes.services import process_start


class Command(BaseCommand):
    help = (
        "Start process NAME with the JSON object --input for business key --key (the latest "
        "version unless --version N). The key names the execution: a second start with the "
        "same key returns the first execution."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: object) -> CommandParser:
        # Django's base --version (print Django's version) gives way to the process version.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="process name, e.g. invoice-approval")
        parser.add_argument(
            "--input", default="{}", help='a JSON object, e.g. \'{"amount": 120}\''
        )
        parser.add_argument("--key", required=True, help="business key, 1-200 characters")
        parser.add_argument(
            "--version", type=int, default=None, help="process version (default: the latest)"
        )

    def handle(
        self, *args: object, name: str, input: str, key: str, version: int | None, **options: object
    ) -> None:
        try:
            data = json.loads(input)
        except ValueError as exc:
            raise CommandError(f"--input is not valid JSON: {exc}.") from None
        if not isinstance(data, dict):
            raise CommandError(
                f"--input must be a JSON object ({{...}}), not a {type(data).__name__}."
            )
        try:
            execution, created = process_start(
                name=name, input=data, business_key=key, version=version
            )
        except InboxError as exc:
            raise CommandError(exc.message) from exc
        what = "started" if created else "already started (same key; nothing new)"
        self.stdout.write(
            f"{what}: {execution.process.name} v{execution.version.version} "
            f"key {execution.business_key!r}\n{execution.execution_arn}"
        )
