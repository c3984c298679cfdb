import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_int, env_list, env_str

ROOT = Path(__file__).resolve().parents[2]


def _production_env(**overrides: str) -> dict[str, str]:
    """Return an environment as a production deployment would set it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "INBOX_", "AWS_"))
    }
    env.update(
        DJANGO_SECRET_KEY=Fernet.generate_key().decode() * 2,
        DJANGO_ALLOWED_HOSTS="inbox.example.com",
        INBOX_TOKEN_KEYS=Fernet.generate_key().decode(),
        INBOX_TOKEN_DIGEST_KEY=Fernet.generate_key().decode(),
        INBOX_EMULATOR="false",
        AWS_REGION="eu-west-1",
        INBOX_VAR_DIR=os.environ["INBOX_VAR_DIR"],
    )
    env.update(overrides)
    return env


def _production_print(script: str, **overrides: str) -> list[str]:
    """Run script after django.setup() in a process with the production environment (and
    overrides); return the words it printed (it must succeed)."""
    env = _production_env(DJANGO_SETTINGS_MODULE="config.settings", **overrides)
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {script}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _django(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def test_env_bool_rejects_a_value_that_is_not_a_boolean(monkeypatch):
    monkeypatch.setenv("SOME_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match=r"SOME_FLAG='maybe' is not a boolean"):
        env_bool("SOME_FLAG", False)


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("Yes", True), ("off", False),
                                                (" false ", False)])
def test_env_bool_reads_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("SOME_FLAG", raw)
    assert env_bool("SOME_FLAG", not expected) is expected


def test_env_bool_uses_the_default_when_unset_or_blank(monkeypatch):
    monkeypatch.setenv("SOME_FLAG", "  ")
    assert env_bool("SOME_FLAG", True) is True


def test_env_int_rejects_a_value_that_is_not_an_integer(monkeypatch):
    monkeypatch.setenv("SOME_PORT", "80a")
    with pytest.raises(ImproperlyConfigured, match=r"SOME_PORT='80a' is not an integer"):
        env_int("SOME_PORT", 1)


def test_env_int_enforces_its_bounds(monkeypatch):
    monkeypatch.setenv("SOME_PORT", "70000")
    with pytest.raises(ImproperlyConfigured, match=r"SOME_PORT=70000 is above the maximum 65535"):
        env_int("SOME_PORT", 1, minimum=1, maximum=65535)
    monkeypatch.setenv("SOME_PORT", "0")
    with pytest.raises(ImproperlyConfigured, match=r"below the minimum 1"):
        env_int("SOME_PORT", 1, minimum=1)


def test_env_str_names_a_missing_required_variable(monkeypatch):
    monkeypatch.delenv("SOME_NAME", raising=False)
    with pytest.raises(ImproperlyConfigured, match="SOME_NAME is required"):
        env_str("SOME_NAME")


def test_env_list_and_choice(monkeypatch):
    monkeypatch.setenv("SOME_LIST", "a, b,,c ")
    assert env_list("SOME_LIST") == ["a", "b", "c"]
    monkeypatch.setenv("SOME_MODE", "sideways")
    with pytest.raises(ImproperlyConfigured, match="SOME_MODE='sideways' is not one of: up, down"):
        env_choice("SOME_MODE", "up", ["up", "down"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DJANGO_DEBUG": "maybe"}, "DJANGO_DEBUG='maybe' is not a boolean"),
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off"),
        ({"INBOX_TOKEN_KEYS": ""}, "INBOX_TOKEN_KEYS is required when DJANGO_DEBUG is off"),
        ({"INBOX_TOKEN_DIGEST_KEY": ""}, "INBOX_TOKEN_DIGEST_KEY is required"),
        ({"INBOX_EMULATOR_PORT": "http"}, "INBOX_EMULATOR_PORT='http' is not an integer"),
        ({"INBOX_EMULATOR": "false", "AWS_REGION": ""}, "AWS_REGION is required when"),
        ({"DATABASE_URL": "nosuchdb://x/y"}, "DATABASE_URL is not usable"),
    ],
)
def test_django_refuses_to_start_on_bad_settings(overrides, message):
    """Each bad value stops every entry point with a message naming the variable."""
    result = _django(_production_env(**overrides), "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_a_bad_token_key_is_named_by_position_and_never_echoed():
    good = Fernet.generate_key().decode()
    secret_looking = "not-a-key-but-secret-123"
    result = _django(_production_env(INBOX_TOKEN_KEYS=f"{good},{secret_looking}"), "check")
    assert result.returncode != 0
    assert "INBOX_TOKEN_KEYS item 2 is not a Fernet key" in result.stderr
    assert secret_looking not in result.stderr
    assert good not in result.stderr


def test_check_deploy_reports_no_warnings_with_production_settings():
    result = _django(_production_env(), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_when_production_would_use_the_emulator():
    result = _django(
        _production_env(INBOX_EMULATOR="true"), "check", "--deploy", "--fail-level", "WARNING"
    )
    assert result.returncode != 0
    assert "processes.W001" in result.stderr


def test_debug_mode_runs_with_nothing_set():
    """A fresh checkout needs no secrets to run in development."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "INBOX_"))}
    env.update(DJANGO_DEBUG="true", INBOX_VAR_DIR=os.environ["INBOX_VAR_DIR"])
    result = _django(env, "check")
    assert result.returncode == 0, result.stderr


def test_a_fresh_checkout_migrates_into_a_var_folder_it_creates(tmp_path):
    """`./dev run` on a fresh clone: no var/ yet, SQLite, nothing set but debug."""
    var = tmp_path / "fresh" / "var"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "INBOX_", "DATABASE_URL", "REDIS_URL"))}
    env.update(DJANGO_DEBUG="true", INBOX_VAR_DIR=str(var))
    # --skip-checks: a system check may touch the file cache (under var/) first; the
    # database must not depend on that.
    result = _django(env, "migrate", "--noinput", "-v", "0", "--skip-checks")
    assert result.returncode == 0, result.stderr
    assert (var / "db.sqlite3").is_file()


@pytest.mark.postgres
def test_a_pooled_web_process_queries_through_psycopg_s_pool(db):
    """DATABASE_POOL_MAX gives the process a bounded pool (the ASGI web's burst of requests
    waits for a free connection); the database answers through it."""
    from urllib.parse import urlsplit, urlunsplit

    from django.db import connection

    url = urlsplit(os.environ["DATABASE_URL"])  # this run's test database, by name
    test_db = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
    env = _production_env(DATABASE_URL=test_db, DATABASE_POOL_MAX="3",
                          DJANGO_SETTINGS_MODULE="config.settings")
    script = ("import django; django.setup(); from django.conf import settings; "
              "from django.db import connection; d = settings.DATABASES['default']; "
              "print(d['CONN_MAX_AGE'], d['OPTIONS']['pool']['max_size']); "
              "c = connection.cursor(); c.execute('select 41 + 1'); print(c.fetchone()[0]); "
              "print(type(connection.pool).__name__, connection.pool._check.__qualname__); "
              "print(connection.connection.adapters.get_loader(1184, 0).__module__)")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Its connections read timestamps with config.postgresql's loader (1184: timestamptz).
    # The pool checks a connection after it sat idle only (config.postgresql.idle).
    assert result.stdout.split() == ["0", "3", "42", "ConnectionPool", "pool_check",
                                     "config.postgresql.base"]


@pytest.mark.postgres
def test_a_statement_run_again_and_again_is_prepared_on_the_server(db):
    """Server-side binding (the default on PostgreSQL): from its fifth run on, the
    connection runs a statement prepared, and PostgreSQL no longer parses and plans it."""
    from django.db import connection

    from accounts.models import Skill

    assert connection.features.uses_server_side_binding
    slug = f"prepared-{os.getpid()}"
    for _ in range(6):
        list(Skill.objects.filter(slug=slug))
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('FROM "accounts_skill"' in sql and '"slug" = $1' in sql for sql in prepared), (
        prepared)


@pytest.mark.postgres
def test_server_side_binding_can_be_turned_off(db):
    printed = _production_print(
        "from django.conf import settings; o = settings.DATABASES['default']['OPTIONS']; "
        "print(o.get('server_side_binding'), o.get('prepare_threshold'))",
        DATABASE_SERVER_SIDE_BINDING="0")
    assert printed == ["None", "None"]


@pytest.mark.parametrize(("debug", "browsable"), [("false", False), ("true", True)])
def test_the_browsable_api_is_served_only_in_debug(debug, browsable):
    """Production answers JSON only; DRF's HTML forms are a development convenience."""
    printed = _production_print(
        "from rest_framework.settings import api_settings; "
        "print(*sorted(r.__name__ for r in api_settings.DEFAULT_RENDERER_CLASSES))",
        DJANGO_DEBUG=debug)
    expected = ["BrowsableAPIRenderer", "JSONRenderer"] if browsable else ["JSONRenderer"]
    assert printed == expected


def test_log_levels_set_one_logger_each():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_LEVEL": "WARNING",
           "LOG_LEVELS": "inbox.tasks.changes=info, celery.beat = ERROR"}
    script = ("import django, logging; django.setup(); print(*(logging.getLevelName("
              "logging.getLogger(n).getEffectiveLevel()) for n in "
              "('', 'inbox.tasks.changes', 'celery.beat')))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["WARNING", "INFO", "ERROR"]


@pytest.mark.parametrize("value", ["inbox=LOUD", "=INFO", "inbox"])
def test_log_levels_refuse_an_item_that_is_not_logger_equals_level(value):
    env = {**os.environ, "DJANGO_DEBUG": "true", "LOG_LEVELS": value}
    result = _django(env, "check")
    assert result.returncode != 0
    assert "LOG_LEVELS" in result.stderr and repr(value) in result.stderr
