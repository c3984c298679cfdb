"""Django's PostgreSQL backend, its timestamps read by psycopg's C parser.

Django's backend reads every timestamptz value through a loader of its own, derived from
psycopg's pure-Python TimestamptzLoader (django.db.backends.postgresql.psycopg_any,
BaseTzLoader), so psycopg-binary's C parser is never used for them (Django ticket #36960,
psycopg issue #1273: the C class cannot be subclassed). A task's row holds eight
timestamps and an HTTP take reads a dozen or more: the regular expression and the Python
arithmetic of each were an eighth of an in-process take's py-spy samples, and reading them
in C saved 6.8 % of its instructions (docs/BENCHMARKS.md, "An HTTP take's instructions,
second round"). The loader here answers exactly what Django's does, the
parsed moment with its tzinfo replaced by the connection's time zone, parsed by whatever
psycopg registered for timestamptz (C with psycopg-binary, its Python class without).
Its connections are checked before use only after they sat idle (config.postgresql.idle).
Everything else is Django's backend unchanged; ENGINE names this module's package.
"""

import datetime
import functools
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import get_adapters_template
from psycopg import adapt, adapters, postgres
from psycopg.abc import AdaptContext
from psycopg.pq import Format

from config.postgresql import idle

TIMESTAMPTZ_OID = postgres.types["timestamptz"].oid
# psycopg's own loader of timestamptz text, as psycopg registered it: the C class when
# psycopg-binary is installed (requirements.txt), the pure-Python one otherwise.
PARSER = adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        # The pool (DATABASE_POOL_MAX) makes its connections with these parameters too.
        params = super().get_connection_params()
        params["context"] = adapters_for(settings.USE_TZ, self.timezone)
        return params

    @property
    def pool(self) -> Any:
        """Django's pool (OPTIONS["pool"], DATABASE_POOL_MAX), made as Django makes it but
        for its check of a connection it hands out: with CONN_HEALTH_CHECKS, only after the
        connection sat idle (idle.pool_check), not psycopg_pool's check of every one."""
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            from psycopg_pool import ConnectionPool

            pool = ConnectionPool(
                # Autocommit as Django's: Django sets each connection's mode when it takes it.
                kwargs={**self.get_connection_params(), "autocommit": True},
                open=False, configure=self._configure_connection,
                check=idle.pool_check if self.settings_dict["CONN_HEALTH_CHECKS"] else None,
                **({} if options is True else options))
            # setdefault: of two threads making it at once, the first one's is kept.
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = super().create_cursor(name)
        idle.used(self.connection)  # Every statement Django runs goes through a cursor.
        return cursor

    def close_if_health_check_failed(self) -> None:
        # CONN_HEALTH_CHECKS' round trip only for a connection that sat idle (config.
        # postgresql.idle). Every cursor calls this: the check already done (or off) is
        # looked at first, as Django's does. A pooled connection is checked by the pool
        # (the pool above: idle.pool_check), never here.
        if (self.connection is not None and self.health_check_enabled
                and not self.health_check_done and idle.recently_used(self.connection)):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()


@functools.lru_cache
def adapters_for(use_tz: bool, timezone: datetime.tzinfo | None) -> adapt.AdaptersMap:
    """Django's adapters for (use_tz, timezone), with timestamptz_loader's loader."""
    context = adapt.AdaptersMap(get_adapters_template(use_tz, timezone))
    context.register_loader(TIMESTAMPTZ_OID, timestamptz_loader(timezone))
    return context


@functools.lru_cache
def timestamptz_loader(timezone: datetime.tzinfo | None) -> type[adapt.Loader]:
    """The loader of timestamptz text whose values are in timezone (None: naive), as
    Django's SpecificTzLoader answers them, parsed by PARSER."""

    class TimestamptzLoader(adapt.Loader):
        # Django's cursor compares it with the connection's own (create_cursor): equal, it
        # leaves this loader in place.
        timezone: datetime.tzinfo | None

        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self.parse = PARSER(oid, context).load

        def load(self, data: Any) -> datetime.datetime:
            return self.parse(data).replace(tzinfo=timezone)

    TimestamptzLoader.timezone = timezone
    return TimestamptzLoader
