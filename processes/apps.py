from django.apps import AppConfig


class ProcessesConfig(AppConfig):
    name = "processes"
    verbose_name = "Processes"

    def ready(self) -> None:
        from processes import checks  # noqa: F401  (registers the deploy checks)
