"""Re-encrypt every stored task token under the newest key of INBOX_TOKEN_KEYS."""

from django.core.management.base import BaseCommand

from inbox.models import Task
from inbox.tokens import token_rotate

BATCH = 500


class Command(BaseCommand):
    help = (
        "Re-encrypt stored task tokens under the first (newest) key of INBOX_TOKEN_KEYS. "
        "Rotation: put the new key first, keep the old ones after it, deploy, run this, "
        "then remove the old keys."
    )

    def handle(self, *args, **options) -> None:
        rotated = 0
        last_pk = None
        while True:
            rows = Task.objects.order_by("pk")
            if last_pk is not None:
                rows = rows.filter(pk__gt=last_pk)
            batch = list(rows.values_list("pk", "token_ciphertext")[:BATCH])
            if not batch:
                break
            for pk, ciphertext in batch:
                # Conditional on the ciphertext read: a row changed meanwhile keeps its value
                # (it was written under the newest key anyway).
                rotated += Task.objects.filter(pk=pk, token_ciphertext=ciphertext).update(
                    token_ciphertext=token_rotate(ciphertext)
                )
            last_pk = batch[-1][0]
        self.stdout.write(f"Re-encrypted {rotated} task token(s) under the newest key.")
