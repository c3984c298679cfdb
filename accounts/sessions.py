"""What a signed-in session remembers about its own age, and the rules read from it.

Three timestamps (seconds since the epoch, time.time()) in the session itself:
SIGNED_IN_AT (the sign-in: the absolute cap counts from it), AUTHENTICATED_AT (the sign-in
or the latest password confirmation: admin changes need it recent) and SEEN_AT (the last
thing the user did: the idle timeout counts from it). The session middleware
(config.middleware.SessionIdleTimeoutMiddleware) ends a session past either limit.
"""

import datetime
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest

SIGNED_IN_AT = "inbox_signed_in_at"
AUTHENTICATED_AT = "inbox_authenticated_at"
SEEN_AT = "inbox_seen_at"
# SEEN_AT is written at most this often: a session is not saved on every request.
SEEN_RESOLUTION_SECONDS = 60


def session_mark_signed_in(sender: object, request: HttpRequest | None, user: Any,
                           **kwargs: Any) -> None:
    """Start the session's clocks (a receiver of user_logged_in: every way of signing in)."""
    if request is None or not hasattr(request, "session"):
        return
    now = time.time()
    request.session[SIGNED_IN_AT] = now
    request.session[AUTHENTICATED_AT] = now
    request.session[SEEN_AT] = now
    _seen(user, now)


def session_mark_reauthenticated(request: HttpRequest) -> None:
    """Record that the user has just confirmed their password."""
    request.session[AUTHENTICATED_AT] = time.time()


def session_recently_authenticated(request: HttpRequest) -> bool:
    """Return whether the user signed in or confirmed their password recently enough."""
    at = request.session.get(AUTHENTICATED_AT)
    return at is not None and time.time() - at < settings.ACCOUNT_REAUTHENTICATION_TIMEOUT


def session_expired(request: HttpRequest) -> str | None:
    """Return why the signed-in session is over ("idle", "maximum age"), or None.

    A session from before these timestamps existed starts its clocks now.
    """
    now = time.time()
    session = request.session
    signed_in_at = session.setdefault(SIGNED_IN_AT, now)
    seen_at = session.setdefault(SEEN_AT, now)
    if now - signed_in_at > settings.INBOX_SESSION_MAX_SECONDS:
        return "maximum age"
    if now - seen_at > settings.INBOX_SESSION_IDLE_SECONDS:
        return "idle"
    return None


def session_touch(request: HttpRequest) -> None:
    """Record the user's activity, at most once a SEEN_RESOLUTION_SECONDS (in the session,
    and as the user's last_seen: the supervisor board's online)."""
    now = time.time()
    if now - request.session.get(SEEN_AT, 0) >= SEEN_RESOLUTION_SECONDS:
        request.session[SEEN_AT] = now
        _seen(request.user, now)


def presence_signed_out(sender: object, request: HttpRequest | None, user: Any,
                        **kwargs: Any) -> None:
    """Forget when the user was seen (a receiver of user_logged_out): no longer online."""
    if user is not None and getattr(user, "pk", None):
        _seen(user, None)


def _seen(user: Any, at: float | None) -> None:
    """Write the user's last_seen: one UPDATE of one column, no read."""
    from accounts.models import User

    moment = datetime.datetime.fromtimestamp(at, tz=datetime.UTC) if at is not None else None
    User.objects.filter(pk=user.pk).update(last_seen=moment)
