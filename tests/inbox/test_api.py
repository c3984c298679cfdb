import pytest

from inbox.models import TaskState


@pytest.fixture
def api(api_client):
    """A client of the user's, with a work-scoped API token."""
    return lambda user: api_client(user, scope="work")


def test_take_next_and_complete_through_the_api(api, make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    client = api(worker)
    queues = client.get("/api/inbox/queues/").json()
    assert queues[0]["skill"] == "invoice-review" and queues[0]["waiting"] == 1
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    assert task["state"] == TaskState.IN_PROGRESS and task["assignee"] == worker.email
    assert [f["name"] for f in task["form"]["fields"]] == ["decision", "comment"]
    assert task["clocks"]["work_deadline"] and task["clocks"]["overall_deadline"]
    assert [e["action"] for e in task["history"]] == ["receive", "take_next"]
    done = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                       {"answer": {"decision": "approve"}, "version": task["version"]},
                       format="json")
    assert done.status_code == 200, done.json()
    assert done.json()["state"] == TaskState.COMPLETING


def test_a_bad_answer_is_a_400_naming_the_field(api, make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    response = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                           {"answer": {"decision": "reject"}}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"comment": "required when decision is reject"}


def test_json_answers_are_validated_as_json_values(api, make_task, make_worker):
    """A boolean is a checkbox's value; 1 is not, and a field the form lacks is refused."""
    worker = make_worker({"invoice-review": 3})
    make_task(form="acknowledge")
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    url = f"/api/inbox/tasks/{task['id']}/complete/"
    response = client.post(url, {"answer": {"done": 1, "seen": True}}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "seen": "unknown field; the form 'acknowledge' has no such field",
        "done": "must be true or false"}
    response = client.post(url, {"answer": "done"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"answer": "must be an object of field values"}
    response = client.post(url, {"answer": {"done": True}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["answer"] == {"done": True, "note": None}


def test_a_stale_version_is_a_409(api, make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    client = api(worker)
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {"version": 1},
                       format="json").status_code == 200
    response = client.post(f"/api/inbox/tasks/{task.pk}/release/", {"version": 1},
                           format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "stale_version"


def test_a_task_of_a_skill_you_do_not_hold_is_a_404_and_in_no_list(
    api, make_task, make_worker, approval_skill
):
    outsider = make_worker({"finance-approval": 5})
    task = make_task()
    client = api(outsider)
    assert client.get(f"/api/inbox/tasks/{task.pk}/").status_code == 404
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json").status_code == 404
    assert client.get("/api/inbox/tasks/mine/").json() == []
    assert [q["skill"] for q in client.get("/api/inbox/queues/").json()] == ["finance-approval"]
    assert client.post("/api/inbox/tasks/next/", {}, format="json").status_code == 404


def test_unknown_and_malformed_task_ids_are_404(api, make_worker, review_skill):
    client = api(make_worker({"invoice-review": 3}))
    assert client.get("/api/inbox/tasks/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert client.get("/api/inbox/tasks/not-a-uuid/").status_code == 404


def test_anonymous_api_calls_are_refused_with_401_naming_the_scheme(client, db):
    response = client.post("/api/inbox/tasks/next/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["code"] == "not_authenticated"


def test_session_posts_need_csrf(make_task, make_worker):
    from django.test import Client

    worker = make_worker({"invoice-review": 3})
    make_task()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(worker)
    assert browser.post("/api/inbox/tasks/next/").status_code == 403


def test_the_answers_plain_dicts_are_what_the_serializers_describe(make_task, make_worker):
    """The API answers task_data/task_detail_data; the schema's serializers say the same."""
    import json

    from rest_framework.renderers import JSONRenderer

    from inbox.api import TaskDetailSerializer, TaskSerializer, task_data, task_detail_data
    from inbox.services.worker import task_complete, task_release, task_take_next

    worker = make_worker({"invoice-review": 3})
    queued = make_task(input={"z": 1, "a": {"nested": [1, 2]}, "m": "ü"})
    make_task()
    held = task_take_next(worker=worker)
    released = task_release(worker=worker, task_id=held.pk, reason="later")
    taken = task_take_next(worker=worker)
    done = task_complete(worker=worker, task_id=taken.pk, answer={"decision": "approve"})
    for task in (queued, released, taken, done):
        task.refresh_from_db()
        sent = JSONRenderer().render  # what a client receives of each
        assert sent(task_detail_data(task)) == sent(TaskDetailSerializer(task).data)
        assert sent(task_data(task)) == sent(TaskSerializer(task).data)
        assert json.loads(sent(task_data(task)))["clocks"]["entered_at"].endswith("Z")
    assert list(task_detail_data(queued)["input"]) == ["z", "a", "m"]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_a_moment_is_shown_as_drf_s_datetime_field_shows_it(zone):
    """The answers' moments (inbox.api._when) as DRF's DateTimeField gives them, in the
    request's current time zone: aware in any zone, naive, with and without micros."""
    import datetime
    import random
    import zoneinfo

    from django.utils import timezone
    from rest_framework import serializers

    from inbox.api import _when

    field = serializers.DateTimeField()
    chance = random.Random(15)
    start = datetime.datetime(1890, 1, 1, tzinfo=datetime.UTC)
    moments = [start + datetime.timedelta(seconds=chance.randrange(200 * 365 * 86400),
                                          microseconds=chance.choice([0, 1, 123456]))
               for _ in range(200)]
    moments += [moment.astimezone(zoneinfo.ZoneInfo("Europe/Paris")) for moment in moments[:50]]
    moments += [moment.replace(tzinfo=None) for moment in moments[:20]]
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        for moment in moments:
            assert _when(moment) == field.to_representation(moment), moment


def test_complete_then_next_answers_the_next_task_in_the_same_request(api, make_task,
                                                                      make_worker):
    """then=next, as the page's "Complete and next": the decision, then the next take."""
    from inbox.models import Task

    worker = make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80)
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    done = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                       {"answer": {"decision": "approve"}, "version": task["version"],
                        "then": "next"}, format="json")
    assert done.status_code == 200, done.json()
    answer = done.json()
    assert (answer["id"], answer["state"]) == (task["id"], TaskState.COMPLETING)
    following = answer["next"]
    assert following["id"] != task["id"] and following["priority"] == 80
    assert following["state"] == TaskState.IN_PROGRESS
    assert following["assignee"] == worker.email
    assert [e["action"] for e in following["history"]] == ["receive", "take_next"]
    assert Task.objects.get(pk=following["id"]).assignee == worker
    # The last one: the decision stands, and the answer says why nothing came next.
    last = client.post(f"/api/inbox/tasks/{following['id']}/complete/",
                       {"answer": {"decision": "approve"}, "then": "next"}, format="json")
    assert last.status_code == 200, last.json()
    assert last.json()["state"] == TaskState.COMPLETING
    assert last.json()["next"] is None
    assert last.json()["next_detail"] == "Nothing is waiting in your queues."


def test_reject_then_next_and_a_plain_complete_takes_nothing(api, make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80), make_task(priority=70)
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    rejected = client.post(f"/api/inbox/tasks/{task['id']}/reject/",
                           {"reason": "Not an invoice.", "then": "next"}, format="json")
    assert rejected.status_code == 200, rejected.json()
    assert rejected.json()["next"]["priority"] == 80
    plain = client.post(f"/api/inbox/tasks/{rejected.json()['next']['id']}/complete/",
                        {"answer": {"decision": "approve"}}, format="json").json()
    assert "next" not in plain and "next_detail" not in plain
    assert client.get("/api/inbox/queues/").json()[0]["waiting"] == 1


def test_then_accepts_only_next(api, make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    response = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                           {"answer": {"decision": "approve"}, "then": "home"}, format="json")
    assert response.status_code == 400
    assert "then" in response.json()["errors"]
    assert client.get(f"/api/inbox/tasks/{task['id']}/").json()["state"] == (
        TaskState.IN_PROGRESS)


def test_a_retried_complete_then_next_answers_the_same_next_task(api, make_task, make_worker):
    """A lost response retried: the decision stands once, and the next task is the one the
    first request took; no second task is taken."""
    from inbox.lifecycle import DECISIONS
    from inbox.models import Task

    assert DECISIONS == ("complete", "reject")  # the table's rows a retry is looked up by

    worker = make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80), make_task(priority=70)
    client = api(worker)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    body = {"answer": {"decision": "approve"}, "version": task["version"], "then": "next"}
    first = client.post(f"/api/inbox/tasks/{task['id']}/complete/", body, format="json")
    again = client.post(f"/api/inbox/tasks/{task['id']}/complete/", body, format="json")
    assert first.status_code == again.status_code == 200, again.json()
    assert again.json()["state"] == TaskState.COMPLETING
    assert again.json()["next"]["id"] == first.json()["next"]["id"]
    assert again.json()["next"]["priority"] == 80
    held = Task.objects.filter(assignee=worker, state=TaskState.IN_PROGRESS)
    assert [t.priority for t in held] == [80]
    # Once the next task is no longer held, a retry takes nothing in its place.
    client.post(f"/api/inbox/tasks/{first.json()['next']['id']}/release/", {},
                format="json")
    late = client.post(f"/api/inbox/tasks/{task['id']}/complete/", body, format="json")
    assert late.status_code == 200
    assert late.json()["next"] is None
    assert "made before" in late.json()["next_detail"]
    assert not Task.objects.filter(assignee=worker, state=TaskState.IN_PROGRESS).exists()
