"""Move executions waiting at a human stage of one process version to a newer version."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import User
from config.errors import InboxError
from inbox.services.migration import migrations_start


class Command(BaseCommand):
    help = (
        "Migrate the executions of NAME v FROM that wait at a human stage (each open task) "
        "to v TO at the same stage: start v TO there with the carried state, move the task "
        "to its token, stop the old execution. Asking again is harmless. A task whose stage "
        "cannot move (missing in v TO, another skill or form) is refused and stays."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the process, e.g. invoice-approval")
        parser.add_argument("--from", dest="from_version", type=int, required=True,
                            metavar="N", help="the version the executions run on")
        parser.add_argument("--to", dest="to_version", type=int, required=True, metavar="M",
                            help="the newer version to move them to")
        parser.add_argument("--by", required=True, metavar="EMAIL",
                            help="the admin asking (recorded in the task's history)")
        parser.add_argument("--reason", required=True, help="why (recorded with it)")
        parser.add_argument("--stage", help="only the tasks waiting at this stage")
        parser.add_argument("--task", dest="task_ids", action="append", metavar="ID",
                            help="only this task (repeatable)")
        parser.add_argument("--dry-run", action="store_true",
                            help="say what would move or be refused; change nothing")

    def handle(self, *args: object, name: str, from_version: int, to_version: int, by: str,
               reason: str, stage: str | None, task_ids: list[str] | None, dry_run: bool,
               **options: object) -> None:
        actor = User.objects.filter(email__iexact=by).first()
        if actor is None:
            raise CommandError(f"--by: no user with the e-mail {by!r}.")
        try:
            results = migrations_start(actor=actor, process_name=name,
                                       from_version=from_version, to_version=to_version,
                                       reason=reason, stage=stage, task_ids=task_ids,
                                       dry_run=dry_run, run_now=True)
        except InboxError as exc:
            raise CommandError(exc.message) from exc
        for result in results:
            line = f"{result.outcome} task {result.task_id} at {result.stage}: " + (
                result.detail or result.to_execution_arn or result.execution_arn)
            if result.status and result.outcome == "already":
                line += f" ({result.status})"
            self.stdout.write(line)
        failed = [r for r in results if r.outcome in ("failed", "refused")]
        self.stdout.write(f"{len(results)} task(s): " + ", ".join(
            f"{sum(r.outcome == o for r in results)} {o}"
            for o in ("started", "already", "planned", "refused", "failed", "requested")
            if any(r.outcome == o for r in results)) if results else
            f"No open task of {name} v{from_version} to migrate.")
        if failed:
            raise CommandError(f"{len(failed)} task(s) not migrated; see above.")
