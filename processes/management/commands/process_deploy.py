"""Deploy process specs (YAML files) as new versions, in Step Functions and in the database."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import InboxError
from processes.compiler import compile_spec
from processes.services import process_deploy, target_current
from processes.spec import ProcessSpec, SpecError, heartbeat_budget_warnings, spec_load


class Command(BaseCommand):
    help = (
        "Deploy each spec file as a new immutable process version (an unchanged spec is a "
        "no-op that makes sure its state machine exists). Every file is checked before "
        "anything is deployed; child processes are deployed before their parents."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="spec files")

    def handle(self, *args: object, paths: list[Path], **options: object) -> None:
        specs = self._specs_checked(paths=paths)
        for spec in specs:
            for warning in heartbeat_budget_warnings(
                    spec, source=spec.source, rate=settings.INBOX_SENDTASK_RATE,
                    share_percent=settings.INBOX_HEARTBEAT_SHARE_PERCENT):
                self.stderr.write(f"warning: {warning}")
        for spec in _children_first(specs):
            try:
                version, created = process_deploy(text=spec.text, source=spec.source)
            except InboxError as exc:
                raise CommandError(f"{spec.source}: not deployed: {exc.message}") from exc
            self.stdout.write(
                f"{'created' if created else 'unchanged'} {version.process.name} "
                f"v{version.version}: {version.state_machine_arn} ({spec.source})"
            )

    def _specs_checked(self, *, paths: list[Path]) -> list[ProcessSpec]:
        """Return every file's spec, parsed and compiled; raise CommandError on any problem."""
        specs: list[ProcessSpec] = []
        problems: list[str] = []
        for path in paths:
            try:
                specs.append(spec_load(path))
            except SpecError as exc:
                problems.extend(exc.problems)
        if not problems:
            try:
                target = target_current()
            except InboxError as exc:
                raise CommandError(exc.message) from exc
            for spec in specs:
                try:
                    compile_spec(spec, target=target)
                except SpecError as exc:
                    problems.extend(exc.problems)
        seen: dict[tuple[str, int], str] = {}
        for spec in specs:
            key = (spec.name, spec.version)
            if key in seen:
                problems.append(
                    f"{spec.source}: {spec.name} v{spec.version} is also in {seen[key]}"
                )
            seen.setdefault(key, spec.source)
        if problems:
            raise CommandError("Nothing deployed:\n" + "\n".join(problems))
        return specs


def _children_first(specs: list[ProcessSpec]) -> list[ProcessSpec]:
    """Return specs ordered so that a child process in the list comes before its parents."""
    by_key = {(spec.name, spec.version): spec for spec in specs}
    ordered: list[ProcessSpec] = []
    visiting: set[tuple[str, int]] = set()

    def visit(spec: ProcessSpec) -> None:
        key = (spec.name, spec.version)
        if spec in ordered or key in visiting:
            return
        visiting.add(key)
        for child in spec.children:
            if child in by_key:
                visit(by_key[child])
        ordered.append(spec)

    for spec in specs:
        visit(spec)
    return ordered
