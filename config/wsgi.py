import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from config.startup import web_warm  # noqa: E402  (needs the settings set up above)

web_warm()
