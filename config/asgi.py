"""ASGI entry point: the same Django site, able to hold the pages' live streams open.

Run by uvicorn (``./dev run``) or by gunicorn with uvicorn's worker in production (see
docs/OPERATIONS.md).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_asgi_application()

from config.startup import web_warm  # noqa: E402  (needs the settings set up above)

web_warm()
