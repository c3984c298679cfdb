"""Verify the hash chain of task histories; name the first broken link of each task."""

from django.core.management.base import BaseCommand, CommandError

from inbox.history import events_verify
from inbox.models import Task


class Command(BaseCommand):
    help = "Verify tasks' append-only histories (hash chains). Exit 1 if any link is broken."

    def add_arguments(self, parser) -> None:
        parser.add_argument("task_ids", nargs="*", help="Task ids (default: every task).")

    def handle(self, *args, task_ids: list[str], **options) -> None:
        tasks = Task.objects.filter(pk__in=task_ids) if task_ids else Task.objects.all()
        if task_ids and tasks.count() != len(set(task_ids)):
            found = {str(pk) for pk in tasks.values_list("pk", flat=True)}
            raise CommandError(f"No such task: {', '.join(sorted(set(task_ids) - found))}")
        checked, broken = 0, 0
        for task in tasks.order_by("created_at").iterator(chunk_size=500):
            checked += 1
            problem = events_verify(task=task)
            if problem:
                broken += 1
                self.stderr.write(f"task {task.pk}: {problem}")
        self.stdout.write(f"Checked {checked} task(s): {broken} with a broken history.")
        if broken:
            raise CommandError("History verification failed.")
