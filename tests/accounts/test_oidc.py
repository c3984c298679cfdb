import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from django.test import Client
from django.urls import reverse
print(reverse("openid_connect_login", kwargs={"provider_id": "cognito"}))
print(reverse("openid_connect_callback", kwargs={"provider_id": "cognito"}))
page = Client().get("/accounts/login/").content.decode()
print("provider-link" if "/accounts/oidc/cognito/login/" in page else "no-provider-link")
print("provider-name" if "Company sign-in" in page else "no-provider-name")
"""


def test_an_oidc_provider_is_plugged_in_from_the_environment_as_documented(tmp_path):
    """The variables in docs/AUTHENTICATION.md add a provider button to the sign-in page.

    Runs in a separate process with its own SQLite file, since installed apps differ.
    """
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        INBOX_VAR_DIR=str(tmp_path),
        INBOX_SOCIAL_PROVIDERS="openid_connect",
        INBOX_OIDC_PROVIDER_ID="cognito",
        INBOX_OIDC_NAME="Company sign-in",
        INBOX_OIDC_CLIENT_ID="client-id",
        INBOX_OIDC_CLIENT_SECRET="client-secret",
        INBOX_OIDC_SERVER_URL="https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_example",
    )
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", PROBE],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "/accounts/oidc/cognito/login/",
        "/accounts/oidc/cognito/login/callback/",
        "provider-link",
        "provider-name",
    ]
