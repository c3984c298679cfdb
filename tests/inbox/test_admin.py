from inbox.models import Outbox, OutboxStatus
from inbox.services.worker import task_complete, task_take_next
from inbox.tokens import token_decrypt


def test_admin_task_pages_show_history_and_never_the_token(client, make_user, make_task,
                                                           make_worker):
    from accounts.roles import Role

    admin = make_user(roles=(Role.ADMIN,))
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    task_complete(worker=worker, task_id=task.pk, answer={"decision": "approve"})
    token = token_decrypt(task.token_ciphertext)
    client.force_login(admin)
    pages = [client.get(path) for path in [
        "/admin/inbox/task/", f"/admin/inbox/task/{task.pk}/change/", "/admin/inbox/outbox/",
        f"/admin/inbox/outbox/{Outbox.objects.get().pk}/change/", "/admin/inbox/intakeerror/",
    ]]
    assert [p.status_code for p in pages] == [200] * 5
    detail = pages[1].content.decode()
    assert "take_next" in detail and "complete" in detail
    assert all(token not in p.content.decode() for p in pages)


def test_admin_requeues_a_dead_callback(client, make_user, make_task, make_worker):
    from accounts.roles import Role

    admin = make_user(roles=(Role.ADMIN,))
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    task_complete(worker=worker, task_id=task.pk, answer={"decision": "approve"})
    Outbox.objects.update(status=OutboxStatus.DEAD, last_error="gave up")
    client.force_login(admin)
    client.post("/admin/inbox/outbox/", {"action": "requeue",
                                         "_selected_action": [Outbox.objects.get().pk]})
    assert Outbox.objects.get().status == OutboxStatus.PENDING
