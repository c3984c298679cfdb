from typing import Any

import pytest

from accounts.models import Dispatch
from accounts.roles import Role
from accounts.services import skill_ensure, worker_skill_set
from inbox.models import Task
from inbox.tokens import token_digest
from tests.factories import envelope, sqs_message


@pytest.fixture
def review_skill(db):
    return skill_ensure(slug="invoice-review", name="Invoice review")


@pytest.fixture
def approval_skill(db):
    return skill_ensure(slug="finance-approval", name="Finance approval")


@pytest.fixture
def check_skill(db):
    return skill_ensure(slug="document-check", name="Document check", dispatch=Dispatch.PUSH)


@pytest.fixture
def make_task(db, review_skill):
    """Return a function that brings a task in through the real intake path."""
    from inbox.intake import intake_message

    def make(**overrides: Any) -> Task:
        body = envelope(**overrides)
        outcome = intake_message(message=sqs_message(body))
        assert outcome == "created", outcome
        return Task.objects.get(token_digest=token_digest(body["taskToken"]))

    return make


@pytest.fixture
def make_worker(make_user):
    """Return a function making a worker holding skills {slug: proficiency}."""
    from accounts.models import Skill

    def make(skills: dict[str, int] | None = None, *, roles=(Role.WORKER,), **kwargs) -> Any:
        worker = make_user(roles=roles, **kwargs)
        for slug, proficiency in (skills or {}).items():
            worker_skill_set(worker=worker, skill=Skill.objects.get(slug=slug),
                             proficiency=proficiency)
        return worker

    return make
