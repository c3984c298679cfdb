"""Environment for the test run, set before Django's settings are imported.

Loaded as a pytest plugin (``-p tests.env`` in pyproject.toml), so it runs before
pytest-django imports the settings. Values already in the environment win:
CI sets DATABASE_URL and REDIS_URL to real PostgreSQL and Redis.
"""

import os
import socket
import tempfile

from cryptography.fernet import Fernet


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_defaults = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": Fernet.generate_key().decode() + Fernet.generate_key().decode(),
    "INBOX_TOKEN_KEYS": Fernet.generate_key().decode(),
    "INBOX_TOKEN_DIGEST_KEY": Fernet.generate_key().decode(),
    "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1,testserver",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    # The browser tests talk plain HTTP to the live server; secure cookies would be dropped.
    "DJANGO_SECURE_COOKIES": "false",
    "INBOX_STATIC_MANIFEST": "false",
    "DJANGO_EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    "INBOX_VAR_DIR": tempfile.mkdtemp(prefix="inbox-test-"),
    "INBOX_EMULATOR_PORT": str(_free_port()),
    # A decision is sent at once, as before undo existed; the undo tests open a window.
    "INBOX_UNDO_SECONDS": "0",
    # Each poll receives at once, as before the window existed; its own tests open it.
    "INBOX_RECEIVE_WINDOW_MS": "0",
    # Playwright's sync API runs an event loop in the test thread.
    "DJANGO_ALLOW_ASYNC_UNSAFE": "true",
}
for _name, _value in _defaults.items():
    os.environ.setdefault(_name, _value)
# STATIC_ROOT: the tests serve static files through the finders, but whitenoise warns
# ("No directory at ...") in every process that starts without it.
os.makedirs(os.path.join(os.environ["INBOX_VAR_DIR"], "static"), exist_ok=True)
