"""Racing threads against the database, for the tests that prove one winner."""

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.db import connection

A = TypeVar("A")
T = TypeVar("T")


def race(action: Callable[[A], T], arguments: Iterable[A]) -> tuple[list[T], list[Exception]]:
    """Run action(argument) in one thread per argument, all released at once by a barrier.

    Return what the actions returned and the exceptions they raised, each in the order
    the threads finished. Every thread closes its own database connection when done.
    """
    arguments = list(arguments)
    results: list[T] = []
    errors: list[Exception] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(arguments))

    def run(argument: A) -> None:
        try:
            barrier.wait()
            result = action(argument)
            with lock:
                results.append(result)
        except Exception as exc:  # returned to the caller, who asserts on it
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(argument,)) for argument in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors
