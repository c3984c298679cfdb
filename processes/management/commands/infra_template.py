"""Write the CloudFormation template of the inbox's AWS resources (docs/OPERATIONS.md)."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from processes.infra import InfraConfig, InfraError, Machine, template_build, template_render
from processes.selectors import process_versions_live

# `aws cloudformation deploy` sends a template up to this size inline; a larger one goes
# through S3 (--s3-bucket).
INLINE_TEMPLATE_MAX = 51_200


class Command(BaseCommand):
    help = (
        "Write one CloudFormation template from the deployed process versions that may still "
        "run executions and the settings: the intake and status queues with their dead-letter "
        "queues, the execution-status rule, a role and log group per process, a state machine "
        "per version with its alarms, and the web, worker, clock and operator policies. The "
        "same database and settings always give the same text."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", type=Path, default=None,
                            help="write it to this file (default: standard output)")
        parser.add_argument("--format", choices=("yaml", "json"), default=None,
                            help="yaml (the default) or json; a --output ending in .json "
                                 "means json")

    def handle(self, *args: Any, output: Path | None, format: str | None,
               **options: Any) -> None:
        fmt = format or ("json" if output is not None and output.suffix == ".json" else "yaml")
        versions = process_versions_live(now=timezone.now())
        machines = [
            Machine(process=v.process.name, version=v.version, name=v.state_machine_name,
                    arn=v.state_machine_arn, asl=v.asl)
            for v in versions
        ]
        try:
            text = template_render(
                template_build(machines=machines, config=InfraConfig.from_settings()), fmt=fmt)
        except InfraError as exc:
            raise CommandError(f"No template written: {exc.message}") from exc
        if output is None:
            self.stdout.write(text, ending="")
        else:
            output.write_text(text, encoding="utf-8")
        names = ", ".join(m.name for m in machines) or "none"
        self.stderr.write(f"{len(machines)} state machines ({names}); {len(text):,} bytes"
                          + (f", written to {output}" if output else "") + ".")
        if len(text.encode()) > INLINE_TEMPLATE_MAX:
            self.stderr.write(
                f"warning: more than {INLINE_TEMPLATE_MAX:,} bytes: deploy it with "
                "`aws cloudformation deploy --s3-bucket ...`.")
        if not settings.INBOX_STATE_MACHINES_FROM_TEMPLATE:
            self.stderr.write(
                "warning: INBOX_STATE_MACHINES_FROM_TEMPLATE is off, so process_deploy creates "
                "state machines itself, and the stack cannot create those again: turn it on "
                "where the stack is the way to production (docs/OPERATIONS.md).")
