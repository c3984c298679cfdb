from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Inbox"

    def ready(self) -> None:
        # Registers the Celery tasks that inbox.effects enqueues by name, in every process
        # (the web's too, where Celery's autodiscovery does not run).
        from inbox import tasks  # noqa: F401
