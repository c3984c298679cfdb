"""Create demo skills and users; print each new user's password once."""

import secrets

from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import Dispatch, User
from accounts.roles import Role
from accounts.services import skill_ensure, user_create, worker_skill_set

# slug: (name, dispatch): reviewers pull invoices; document checks are offered (push).
SKILLS = {
    "invoice-review": ("Invoice review", Dispatch.PULL),
    "finance-approval": ("Finance approval", Dispatch.PULL),
    "document-check": ("Document check", Dispatch.PUSH),
}

# email, name, roles, {skill: proficiency}
USERS = [
    ("admin@example.com", "Ada Admin", [Role.ADMIN], {}),
    ("supervisor@example.com", "Sam Supervisor", [Role.SUPERVISOR],
     {"invoice-review": 5, "finance-approval": 5, "document-check": 5}),
    ("ana@example.com", "Ana Reviewer", [Role.WORKER], {"invoice-review": 4}),
    ("ben@example.com", "Ben Reviewer", [Role.WORKER],
     {"invoice-review": 2, "finance-approval": 3}),
    ("cleo@example.com", "Cleo Reviewer", [Role.WORKER],
     {"finance-approval": 5, "document-check": 3}),
]


class Command(BaseCommand):
    help = "Create demo skills and users (idempotent). New users' passwords are printed once."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--reset-passwords", action="store_true",
            help="Give existing demo users new passwords and print them.",
        )

    def handle(self, *args, reset_passwords: bool = False, **options) -> None:
        printed: list[tuple[str, str, str]] = []
        with transaction.atomic():
            skills = {
                slug: skill_ensure(slug=slug, name=name, dispatch=dispatch)
                for slug, (name, dispatch) in SKILLS.items()
            }
            for email, full_name, roles, held in USERS:
                password = secrets.token_urlsafe(12)
                first, last = full_name.split(" ", 1)
                user = User.objects.filter(email=email).first()
                if user is None:
                    user = user_create(email=email, password=password, roles=roles,
                                       first_name=first, last_name=last)
                    for slug, proficiency in held.items():
                        worker_skill_set(worker=user, skill=skills[slug], proficiency=proficiency)
                elif reset_passwords:
                    user.set_password(password)
                    user.save(update_fields=["password"])
                else:
                    continue
                printed.append((email, ", ".join(r.value for r in roles), password))
        if not printed:
            self.stdout.write(
                "Demo users exist already; their passwords were printed when they were "
                "created. New ones: .venv/bin/python manage.py demo_setup --reset-passwords"
            )
            return
        self.stdout.write(self.style.WARNING("Demo users (passwords shown only now):"))
        for email, roles, password in printed:
            self.stdout.write(f"  {email:<24} {roles:<11} {password}")
