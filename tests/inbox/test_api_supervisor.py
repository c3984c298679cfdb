from rest_framework.test import APIClient

from accounts.roles import Role
from inbox.models import Outbox, TaskState
from inbox.services.worker import task_claim, task_release


def _client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_supervisor_reassigns_returns_extends_and_aborts_through_the_api(make_task,
                                                                       make_worker):
    boss = make_worker({"invoice-review": 5}, roles=(Role.SUPERVISOR,))
    ana = make_worker({"invoice-review": 3})
    task = make_task()
    api = _client(boss)
    listed = api.get("/api/inbox/supervisor/tasks/").json()
    assert [t["id"] for t in listed] == [str(task.pk)]
    moved = api.post(f"/api/inbox/supervisor/tasks/{task.pk}/reassign/",
                     {"worker": ana.email, "reason": "she knows Globex"}, format="json")
    assert moved.status_code == 200, moved.json()
    assert (moved.json()["state"], moved.json()["assignee"]) == ("in_progress", ana.email)
    extended = api.post(f"/api/inbox/supervisor/tasks/{task.pk}/extend/",
                        {"clock": "work", "seconds": 600, "reason": "needs a call"},
                        format="json")
    assert extended.status_code == 200
    assert extended.json()["clocks"]["work_deadline"] > moved.json()["clocks"]["work_deadline"]
    back = api.post(f"/api/inbox/supervisor/tasks/{task.pk}/return/", {"reason": "ana left"},
                    format="json")
    assert (back.json()["state"], back.json()["assignee"]) == ("queued", None)
    aborted = api.post(f"/api/inbox/supervisor/tasks/{task.pk}/abort/",
                       {"reason": "duplicate invoice"}, format="json")
    assert aborted.json()["state"] == TaskState.ABORTING
    outbox = Outbox.objects.get(task=task)
    assert (outbox.error, outbox.cause) == ("HumanTask.TimedOut", "duplicate invoice")
    actions = [e["action"] for e in aborted.json()["history"]]
    assert actions == ["receive", "reassign", "extend_work", "return", "abort"]


def test_workers_cannot_use_the_supervisor_api(make_task, make_worker):
    ana = make_worker({"invoice-review": 3})
    task = make_task()
    api = _client(ana)
    assert api.get("/api/inbox/supervisor/tasks/").status_code == 403
    assert api.post(f"/api/inbox/supervisor/tasks/{task.pk}/abort/", {"reason": "x"},
                    format="json").status_code == 403


def test_bulk_reports_each_task_and_one_failure_does_not_stop_the_rest(make_task,
                                                                       make_worker):
    boss = make_worker({"invoice-review": 5}, roles=(Role.SUPERVISOR,))
    ana = make_worker({"invoice-review": 3})
    first, second = make_task(), make_task()
    task_claim(worker=ana, task_id=second.pk)
    task_release(worker=ana, task_id=second.pk)
    aborted = _client(boss).post(
        "/api/inbox/supervisor/tasks/bulk/",
        {"action": "abort", "task_ids": [str(first.pk), str(second.pk)], "reason": "batch"},
        format="json").json()
    assert aborted["outcomes"] == {str(first.pk): "ok", str(second.pk): "ok"}
    third = make_task()
    task_claim(worker=ana, task_id=third.pk)
    again = _client(boss).post(
        "/api/inbox/supervisor/tasks/bulk/",
        {"action": "return", "task_ids": [str(first.pk), str(third.pk)], "reason": "oops"},
        format="json").json()
    assert again["outcomes"] == {str(first.pk): "Cannot return a task that is aborting.",
                                 str(third.pk): "ok"}
    missing = _client(boss).post("/api/inbox/supervisor/tasks/bulk/",
                                 {"action": "reassign", "task_ids": [str(first.pk)],
                                  "reason": "x"}, format="json")
    assert missing.status_code == 400
