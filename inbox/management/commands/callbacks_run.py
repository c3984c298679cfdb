"""Run the callbacks' sender: each decision reaches Step Functions as its undo window closes."""

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from inbox import ratelimit
from inbox.loops import loop_run
from inbox.services.callback import Sender, outbox_relay
from inbox.wakeup import Wakeup
from processes import aws


class Command(BaseCommand):
    help = (
        "Send the outbox's callbacks until stopped: sleep until the next pending row falls "
        "due or PostgreSQL tells of a new one (NOTIFY inbox_outbox; on SQLite at most "
        "INBOX_CALLBACKS_MAX_WAIT_MS), then claim and send every due row in "
        "batches, the calls at once within the shared SendTask rate. A process of its own, "
        "so no Celery message is sent per decision and no other work holds an answer up. "
        "Several may run at once (each row is claimed once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true",
                            help="One round, then stop (for scripts and tests).")

    def handle(self, *args: Any, **options: Any) -> None:
        most = settings.INBOX_CALLBACKS_MAX_WAIT_SECONDS
        aws.clients_build("stepfunctions")  # before the first answer, not by it
        ratelimit.store_ready()  # the SendTask* budget's store too
        if options["once"]:
            wait = outbox_relay(most=most)
            self.stdout.write(f"callbacks: one round done, next in {wait:.3f} s")
            return
        stop, wakeup = threading.Event(), Wakeup()

        def stopping(*_: Any) -> None:
            stop.set()
            wakeup.interrupt()  # a sleep of up to LISTEN_MOST_SECONDS ends now

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stopping)
        self.stdout.write("Callbacks sender running", ending="\n")
        self.stdout.flush()
        sender = Sender()
        try:
            loop_run("callbacks", lambda: sender.round(most=wakeup.most(most)), stop,
                     what="sender", sleep=wakeup.wait)
        finally:
            sender.close()  # the calls still out are recorded before the process ends
            wakeup.close()
        self.stdout.write("Callbacks sender stopped.")
