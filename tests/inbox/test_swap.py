"""Complete and next for a page that swaps in place (inbox.js posts with X-Inbox-Swap): the
decision's own response is the next task's page; a redirect comes back as its location."""

from django.urls import reverse

from inbox.models import Task, TaskState
from inbox.services.worker import task_take_next

SWAP = {"HTTP_X_INBOX_SWAP": "1"}


def _answer(task: Task, **fields: str) -> dict:
    return {"version": task.version, "decision": "approve", "then": "next", **fields}


def test_the_decision_answers_with_the_next_tasks_page_once_both_are_committed(
    make_task, worker, browser_for
):
    make_task(title="Review invoice INV-1", priority=60)
    make_task(title="Review invoice INV-2", priority=50)
    first = task_take_next(worker=worker)
    client = browser_for(worker)

    response = client.post(reverse("inbox:task-complete", args=[first.pk]), _answer(first),
                           **SWAP)

    second = Task.objects.get(title="Review invoice INV-2")
    assert response.status_code == 200
    assert response["X-Inbox-Location"] == reverse("inbox:task", args=[second.pk])
    page = response.content.decode()
    assert "<title>Review invoice INV-2 · Inbox</title>" in page
    assert "Completed: Review invoice INV-1." in page
    assert 'id="answer-form"' in page and f'value="{second.version}"' in page
    assert Task.objects.get(pk=first.pk).state == TaskState.COMPLETING
    assert (second.state, second.assignee) == (TaskState.IN_PROGRESS, worker)
    # The message was shown by this page: the next one does not repeat it.
    assert "Completed:" not in client.get(reverse("inbox:home")).content.decode()


def test_without_the_header_the_decision_redirects_as_before(make_task, worker, browser_for):
    make_task()
    make_task()
    first = task_take_next(worker=worker)

    response = browser_for(worker).post(reverse("inbox:task-complete", args=[first.pk]),
                                        _answer(first))

    assert response.status_code == 302
    assert "X-Inbox-Location" not in response


def test_a_redirect_comes_back_as_its_location_and_keeps_its_message(
    make_task, worker, browser_for
):
    """Nothing waits after the last task: the script opens home, which says so."""
    make_task()
    task = task_take_next(worker=worker)
    client = browser_for(worker)

    response = client.post(reverse("inbox:task-complete", args=[task.pk]), _answer(task),
                           **SWAP)

    assert (response.status_code, response["X-Inbox-Location"]) == (204, reverse("inbox:home"))
    assert response.content == b""
    assert "Nothing is waiting in your queues." in client.get(
        reverse("inbox:home")).content.decode()


def test_a_refused_decision_comes_back_as_the_task_page_to_open(make_task, worker,
                                                                browser_for):
    make_task()
    task = task_take_next(worker=worker)
    client = browser_for(worker)

    response = client.post(reverse("inbox:task-complete", args=[task.pk]),
                           {**_answer(task), "version": task.version + 5}, **SWAP)

    assert response.status_code == 204
    assert response["X-Inbox-Location"] == reverse("inbox:task", args=[task.pk])
    assert "The task changed since you loaded it" in client.get(
        response["X-Inbox-Location"]).content.decode()


def test_a_bad_answer_comes_back_as_the_page_with_its_errors(make_task, worker, browser_for):
    make_task()
    task = task_take_next(worker=worker)

    response = browser_for(worker).post(reverse("inbox:task-complete", args=[task.pk]),
                                        _answer(task, decision="reject"), **SWAP)

    assert response.status_code == 400
    assert "X-Inbox-Location" not in response
    assert 'id="field-comment-error"' in response.content.decode()
    assert Task.objects.get(pk=task.pk).state == TaskState.IN_PROGRESS
