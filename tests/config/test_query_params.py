"""Crafted query parameters on the pages and the live stream: a 400 or nothing, never a 500.

The probe of issue 13 found 500s from board cursors; these are the other pages that read
a row id or a text cursor from their links (config.query reads them all).
"""

import pytest
from django.db import connection

from accounts.models import AuditEvent
from config.query import row_id, text_ok

CRAFTED_IDS = ["²", "1" * 5000, "-1", "1e3", "0x10", " 7", "7\x00"]


@pytest.mark.parametrize("value", CRAFTED_IDS)
def test_a_crafted_row_id_is_not_one(value):
    assert row_id(value) is None


def test_row_ids_are_ascii_digits_within_a_bigint():
    assert row_id("0") is None  # rows count from 1
    assert row_id("0", minimum=0) == 0  # an event cursor before the first event
    assert row_id("9" * 18) == 10**18 - 1
    assert row_id("9" * 19) is None
    assert row_id(None) is None
    assert text_ok("ana@example.com", longest=254)
    assert not text_ok("ana\x00@example.com", longest=254)
    assert not text_ok("a" * 255, longest=254)


@pytest.mark.parametrize("value", ["²", "1" * 5000, "%00"])
def test_the_skills_page_takes_a_crafted_focus_link_without_a_500(admin, browser_for, value):
    client = browser_for(admin)
    response = client.get(f"/team/skills/?worker={value}&field=save")
    assert response.status_code == 200  # a link back to a cell: a bad one focuses none


def test_a_crafted_skills_page_cursor_answers_400_with_the_first_page(admin, browser_for):
    response = browser_for(admin).get("/team/skills/?after=ana%00@example.com")
    assert response.status_code == 400
    assert "That page link is broken" in response.content.decode()


@pytest.mark.parametrize("query", ["before=²", "before=" + "1" * 5000, "email=a%00b",
                                   "before=-5"])
def test_a_crafted_audit_log_link_answers_400_naming_it(admin, browser_for, query):
    client = browser_for(admin)  # signing in is an entry itself
    entries = AuditEvent.objects.count()
    response = client.get(f"/team/audit/?{query}")
    assert response.status_code == 400
    assert AuditEvent.objects.count() == entries


@pytest.mark.parametrize("since", ["²", "9" * 30, "-3"])
def test_a_crafted_live_cursor_is_ignored_not_a_500(worker, browser_for, since):
    """Under WSGI the stream answers 204 (no stream); what matters is that the cursor is
    read without an error (SQLite has no integer past 2^63)."""
    from django.test import RequestFactory

    from inbox.views_live import _last_event_id

    request = RequestFactory().get(f"/live/?since={since}", HTTP_LAST_EVENT_ID=since)
    assert _last_event_id(request) is None
    assert browser_for(worker).get(f"/live/?since={since}").status_code in (200, 204)
    assert connection.vendor in ("sqlite", "postgresql")
