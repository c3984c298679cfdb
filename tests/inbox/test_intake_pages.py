"""The admins' intake pages: the messages the intake refused, and the redrive."""

import re

import pytest

from accounts.roles import Role
from inbox.models import IntakeError
from inbox.services.intake import intake_message
from processes import aws
from tests.factories import envelope, sqs_message
from tests.pages import help_keys
from tests.sfn import unique


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_the_intake_pages_do_not_exist_for_workers_and_supervisors(role, make_user,
                                                                   browser_for):
    client = browser_for(make_user(roles=(role,)))
    assert client.get("/team/intake/").status_code == 404
    assert client.post("/team/intake/redrive/").status_code == 404


def test_intake_errors_are_listed_with_their_problems(admin, browser_for, review_skill):
    """A message with an unknown skill is refused by the real intake and shows up here."""
    message = sqs_message(envelope(skill="no-such-skill"))
    assert intake_message(message=message) != "created"
    error = IntakeError.objects.get()
    assert error.message_id == message["MessageId"]
    page = browser_for(admin).get("/team/intake/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"<code>{error.message_id}</code>" in html
    for problem in error.problems:
        assert f"<li>{problem}</li>" in html
    assert 'action="/team/intake/redrive/"' in html


@pytest.fixture
def queues(settings, emulator) -> dict[str, str]:
    """Give the test an intake queue and dead-letter queue of its own."""
    name = unique("team-intake")
    settings.INBOX_INTAKE_QUEUE = name
    settings.INBOX_INTAKE_DLQ = f"{name}-dlq"
    return aws.intake_queues_ensure()


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_redrive_moves_dead_letters_back_to_the_intake_queue(queues, admin, browser_for):
    for _ in range(2):
        aws.message_send(url=queues["dlq_url"], body="{}")
    client = browser_for(admin, enforce_csrf_checks=True)
    assert client.post("/team/intake/redrive/").status_code == 403
    page = client.get("/team/intake/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post("/team/intake/redrive/", {"csrfmiddlewaretoken": token},
                           follow=True)
    assert messages_of(response) == [
        "Moved 2 message(s) from the dead-letter queue back to the intake queue."]
    attributes = aws.queue_attributes(url=queues["queue_url"])
    assert attributes["ApproximateNumberOfMessages"] == "2"
    response = client.post("/team/intake/redrive/", {"csrfmiddlewaretoken": token},
                           follow=True)
    assert messages_of(response) == ["The dead-letter queue is empty."]


def test_the_help_lists_only_the_shortcuts_every_page_has(admin, browser_for):
    html = browser_for(admin).get("/team/intake/").content.decode()
    assert help_keys(html) == {"?", "Esc"}
