"""Create an API token for a user and print it once (for scripts and CI), audited.

    manage.py api_token_create --email ci@example.com --scope work --days 30 --name ci

Only the token goes to standard output, so a script can capture it; what was made goes to
standard error. The audit log records it with no actor (a command).
"""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.api_tokens import api_token_create
from accounts.models import ApiScope, User
from config.errors import InboxError


class Command(BaseCommand):
    help = "Create an API token for a user and print it (shown this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--email", required=True, help="The token's user.")
        parser.add_argument("--scope", required=True, choices=ApiScope.values,
                            help="What it may do (within the user's roles).")
        parser.add_argument("--days", type=int, default=None,
                            help=f"Days until it expires (default "
                                 f"{settings.INBOX_API_TOKEN_DAYS}, at most "
                                 f"{settings.INBOX_API_TOKEN_MAX_DAYS}).")
        parser.add_argument("--name", required=True, help="Its label, e.g. ci.")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(email__iexact=options["email"]).first()
        if user is None:
            raise CommandError(f"No user {options['email']}.")
        try:
            token, secret = api_token_create(user=user, name=options["name"],
                                             scope=options["scope"], days=options["days"],
                                             actor=None)
        except InboxError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(secret)
        self.stderr.write(f"Created the API token {token.name!r} ({token.scope}) of "
                          f"{user.email}, expiring {token.expiry:%Y-%m-%d %H:%M} UTC. It is "
                          "shown only this once.")
