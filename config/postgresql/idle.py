"""A connection is checked before use only after it sat idle: not on every request.

Django's CONN_HEALTH_CHECKS (and psycopg_pool's check, which Django passes a pool with it)
run a round trip before each request's first query, to find a connection the server or the
network dropped while it sat unused. A connection that ran a statement less than
CHECK_AFTER_IDLE seconds ago is used without one, as HikariCP does within its
aliveBypassWindowMs (500 ms) and PgBouncer within server_check_delay (30 s): under load,
where every connection is reused within milliseconds, no request pays for the check; a
connection idle longer is checked as before. What it gives up: a connection that broke
within the last second (the server restarted under load) fails the one request that uses
it, loudly (a 500), and is then closed, where the check would have replaced it first.
docs/DECISIONS.md, "A connection is checked only after it sat idle".

config.postgresql.base makes the pool with pool_check.
"""

import time
from typing import Any

CHECK_AFTER_IDLE = 1.0  # Seconds.
_NEVER = float("-inf")


def used(connection: Any) -> None:
    """Note that the driver's connection runs a statement now."""
    connection.inbox_used_at = time.monotonic()


def recently_used(connection: Any) -> bool:
    """Whether the driver's connection ran a statement less than CHECK_AFTER_IDLE ago."""
    return time.monotonic() - getattr(connection, "inbox_used_at", _NEVER) < CHECK_AFTER_IDLE


def pool_check(connection: Any) -> None:
    """psycopg_pool's check (the pool's check= option): its own check_connection, after
    the connection sat idle; raise if it no longer works (the pool then replaces it)."""
    if recently_used(connection):
        return
    from psycopg_pool import ConnectionPool

    ConnectionPool.check_connection(connection)
