"""A load process for bench/sweeper.py: threads taking the next task and releasing it.

    DATABASE_URL=... python bench/_taker.py THREADS PREFIX

Each thread is a worker of its own (made here, pull skills of the bench database), taking
and releasing as fast as it can until SIGTERM; then the process prints how many it did.
Run as separate processes so the load does not share the sweeper's interpreter (GIL).
"""

import signal
import sys
import threading
import time

from _common import workers_create


def main() -> None:
    import django

    django.setup()
    from accounts.models import Skill, User
    from config.errors import InboxError
    from inbox.services.worker import task_release, task_take_next

    count, prefix = int(sys.argv[1]), sys.argv[2]
    pull = list(Skill.objects.filter(dispatch="pull").values_list("pk", flat=True))
    ids = workers_create(count, skills_of=lambda i: pull, prefix=prefix, capacity=5)
    stopping = threading.Event()
    takes = [0] * count

    def take(index: int, worker: User) -> None:
        from django.db import connection

        try:
            while not stopping.is_set():
                try:
                    task = task_take_next(worker=worker)
                    task_release(worker=worker, task_id=task.pk)
                except InboxError:  # nothing to take, at capacity, or a clock won the race
                    time.sleep(0.05)
                    continue
                takes[index] += 1
        finally:
            connection.close()

    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    threads = [threading.Thread(target=take, args=(i, worker))
               for i, worker in enumerate(User.objects.filter(pk__in=ids).order_by("pk"))]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    while not stopping.wait(0.2):
        pass
    for thread in threads:
        thread.join(timeout=30)
    print(f"takes {sum(takes)}", flush=True)


if __name__ == "__main__":
    main()
