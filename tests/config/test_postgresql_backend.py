"""config.postgresql: Django's PostgreSQL backend with timestamps parsed by psycopg's C
loader, answering exactly what Django's own loader answers."""

import datetime
import random
import zoneinfo

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg.pq import Format

from accounts.models import User
from config.postgresql.base import PARSER, TIMESTAMPTZ_OID, timestamptz_loader
from tests.drills.conftest import backend_terminate, own_connection

pytestmark = pytest.mark.postgres

ZONES = ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Amsterdam", "Pacific/Chatham"]


def _moments() -> list[str]:
    """Moments as SQL literals: seeded random ones over three centuries, with every number
    of fractional digits PostgreSQL prints, and the edges (historical offsets in seconds,
    a leap day, the year 1's first moment, the infinities)."""
    chance = random.Random(15)
    start = datetime.datetime(1850, 1, 1, tzinfo=datetime.UTC)
    moments = []
    for n in range(300):
        moment = start + datetime.timedelta(seconds=chance.randrange(300 * 365 * 86400))
        micros = [0, 500000, 120000, 123000, 123400, 123450, 123456][n % 7]
        moments.append(moment.replace(microsecond=micros).isoformat())
    return [*moments, "1900-01-01 00:00:00+00", "1937-07-01 00:00:00+00",
            "2024-02-29 23:59:59.999999+00", "0001-01-03 00:00:00+00", "infinity",
            "-infinity"]


def _django_loader(zone: datetime.tzinfo | None) -> type:
    class SpecificTzLoader(BaseTzLoader):  # As django's register_tzloader makes it.
        timezone = zone

    return SpecificTzLoader


def _loaded(loader: psycopg.adapt.Loader, text: bytes) -> tuple:
    """What a loader answers for text: the moment, its wall clock and its tzinfo exactly,
    or the error it raises."""
    try:
        value = loader.load(text)
    except psycopg.DataError as exc:
        return ("error", type(exc), str(exc))
    return (value, value.replace(tzinfo=None).isoformat(), value.tzinfo)


def test_every_connection_reads_timestamps_with_psycopg_s_c_parser(db):
    connection.ensure_connection()
    ours = timestamptz_loader(connection.timezone)
    assert connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) is ours
    # Django's cursor leaves it in place (its time zone is the connection's).
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) is ours
    # requirements.txt installs psycopg[binary]: the parser is its C class.
    assert PARSER.__module__.startswith("psycopg_binary"), PARSER


@pytest.mark.parametrize("session_zone", ZONES)
@pytest.mark.parametrize("zone", ["connection", None, "Europe/Paris"])
def test_a_timestamp_loads_exactly_as_django_s_own_loader_loads_it(db, session_zone, zone):
    """Over ~300 moments, in sessions of five time zones (offsets of minutes and, before
    1900, of seconds), for the connection's zone, none (naive) and another: the same
    value, wall clock and tzinfo, or the same error."""
    tzinfo = (connection.timezone if zone == "connection"
              else None if zone is None else zoneinfo.ZoneInfo(zone))
    with connection.cursor() as cursor:
        # Local to the test's transaction, which is rolled back.
        cursor.execute("SELECT set_config('TimeZone', %s, true)", [session_zone])
        texts = []
        for moment in _moments():
            cursor.execute("SELECT %s::timestamptz::text", [moment])
            texts.append(cursor.fetchone()[0].encode())
    raw = connection.connection
    assert raw.info.parameter_status("TimeZone") == session_zone
    ours = timestamptz_loader(tzinfo)(TIMESTAMPTZ_OID, raw)
    djangos = _django_loader(tzinfo)(TIMESTAMPTZ_OID, raw)
    assert ours.timezone == djangos.timezone
    for text in texts:
        assert _loaded(ours, text) == _loaded(djangos, text), text


def test_a_model_s_moment_reads_back_as_written(db):
    joined = datetime.datetime(2026, 12, 7, 18, 30, 1, 234567, tzinfo=datetime.UTC)
    user = User.objects.create(email="moment@example.com", date_joined=joined)
    read = User.objects.get(pk=user.pk).date_joined
    assert read == joined
    assert read.tzinfo is connection.timezone


def _checks(monkeypatch) -> list[int]:
    """Count Django's health checks (is_usable's round trip) of the connection."""
    made = []
    is_usable = connection.is_usable
    monkeypatch.setattr(connection, "is_usable", lambda: made.append(1) or is_usable())
    return made


def _next_request() -> None:
    # What close_old_connections does at a request's start: the check is due again.
    connection.health_check_done = False


def test_a_connection_used_within_the_second_runs_no_health_check(db, monkeypatch):
    from config.postgresql import idle

    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    User.objects.exists()
    checks = _checks(monkeypatch)
    _next_request()
    User.objects.exists()
    assert checks == []
    # Idle for longer: checked once, at the request's first statement.
    connection.connection.inbox_used_at -= idle.CHECK_AFTER_IDLE + 0.5
    _next_request()
    User.objects.exists()
    User.objects.exists()
    assert checks == [1]


def test_a_connection_dropped_while_idle_is_replaced_before_use(transactional_db):
    """The server ends the connection (a restart, an idle timeout); after it sat idle,
    the next request's check finds it gone and its statement runs on a new one."""
    from config.postgresql import idle

    User.objects.exists()
    dropped = connection.connection
    backend_terminate(dropped.info.backend_pid)
    dropped.inbox_used_at -= idle.CHECK_AFTER_IDLE + 0.5
    _next_request()
    assert User.objects.exists() in (True, False)
    assert connection.connection is not dropped


def test_the_pool_checks_a_connection_only_after_it_sat_idle(db):
    """psycopg_pool's check (the backend's pool is made with it): a connection that ran a
    statement within the second is handed out as it is; one idle longer is checked, and a
    dead one raises, so that the pool replaces it."""
    from config.postgresql import idle

    with own_connection() as dead:
        backend_terminate(dead.info.backend_pid)
        idle.used(dead)
        idle.pool_check(dead)  # Used within the second: not checked.
        dead.inbox_used_at -= idle.CHECK_AFTER_IDLE + 0.5
        with pytest.raises(psycopg.OperationalError):
            idle.pool_check(dead)
