"""Deploy process specs (YAML files) as new versions, in Step Functions and in the database."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import InboxError
from processes.compiler import compile_spec
from processes.services import (
    child_ceilings,
    deployed_unchanged,
    process_deploy,
    target_current,
)
from processes.spec import (
    ProcessSpec,
    SpecError,
    heartbeat_budget_warnings,
    spec_load,
    spec_parse,
)


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
        unchanged: set[tuple[str, int]] = set()
        for path in paths:
            try:
                specs.append(spec_load(path))
            except SpecError as exc:
                spec = _unchanged_deployed(path)
                if spec is None:
                    problems.extend(exc.problems)
                    continue
                specs.append(spec)
                unchanged.add((spec.name, spec.version))
        if not problems:
            try:
                target = target_current()
            except InboxError as exc:
                raise CommandError(exc.message) from exc
            # Children first: a parent's ceiling includes its children's, which are
            # deployed ones or, not deployed yet, the ones compiled here.
            ceilings: dict[tuple[str, int], int] = {}
            for spec in _children_first(specs):
                if (spec.name, spec.version) in unchanged:
                    continue  # Its stored ASL is what deploys; a parent reads its ceiling.
                try:
                    asl = compile_spec(spec, target=target, children=child_ceilings(
                        spec=spec, compiled=ceilings))
                except SpecError as exc:
                    problems.extend(exc.problems)
                except InboxError as exc:
                    problems.append(f"{spec.source}: {exc.message}")
                else:
                    ceilings[(spec.name, spec.version)] = asl["TimeoutSeconds"]
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


def _unchanged_deployed(path: Path) -> ProcessSpec | None:
    """Return the spec in path if it is a deployed version's unchanged text, else None.

    Such a version may predate a rule for new versions and still deploys as it is
    (processes.services.process_deploy only makes sure its state machine exists).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if deployed_unchanged(text=text, source=str(path)) is None:
        return None
    return spec_parse(text, source=str(path), deployed=True)


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
