"""Bounded input: crafted envelopes, board cursors and filters are refused clearly, never a 500.

Each crafted input the security probe of issue #13 sent is here: refused with a message
naming what is wrong (an IntakeError for an envelope, a 400 page for the board), and
nothing else changes.
"""

import datetime
import json
import logging
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from config.json_bounds import MAX_DEPTH, json_depth, value_depth
from inbox import board
from inbox.models import IntakeError, Task
from inbox.services.intake import intake_message
from processes.envelope import MAX_INPUT_BYTES, envelope_read
from tests.factories import envelope, sqs_message

pytestmark = pytest.mark.django_db


def _nested(depth: int) -> str:
    """Return JSON text of arrays nested depth deep (built as text: json.dumps recurses)."""
    return "[" * depth + "1" + "]" * depth


def _with_input(input_json: str, **overrides) -> str:
    """Return an envelope body whose input is the given JSON text, written as is."""
    return json.dumps(envelope(input={"x": "HERE"}, **overrides)).replace('"HERE"', input_json)


def _refused(body: str | dict, **kwargs) -> IntakeError:
    message = sqs_message(body, **kwargs)
    assert intake_message(message=message) == "invalid"
    return IntakeError.objects.get(message_id=message["MessageId"])


# Envelope size -----------------------------------------------------------------------------


def test_an_input_of_256_kib_is_taken_and_one_byte_more_is_refused_naming_its_size(
        review_skill):
    """Counted as Step Functions counts: the input's compact JSON in UTF-8 ("é" is 2 bytes)."""
    # {"s":"…"} is 8 bytes around the string.
    fits = {"s": "é" * ((MAX_INPUT_BYTES - 8) // 2)}
    assert intake_message(message=sqs_message(envelope(input=fits))) == "created"

    error = _refused(envelope(input={"s": fits["s"] + "x"}))

    assert error.problems == ["input: 262,145 bytes, more than the 262,144 Step Functions "
                              "allows"]
    assert Task.objects.count() == 1


# Envelope depth -----------------------------------------------------------------------------


def test_an_input_nested_64_deep_is_taken_and_65_deep_is_refused(review_skill):
    # The input object is level 1; its "x" holds the rest.
    deepest = _with_input(_nested(MAX_DEPTH - 1))
    assert intake_message(message=sqs_message(deepest)) == "created"
    assert value_depth(Task.objects.get().input) == MAX_DEPTH

    error = _refused(_with_input(_nested(MAX_DEPTH)))

    assert error.problems == ["(body): nested 66 deep, more than 65 (the envelope, and its "
                              "input at most 64 levels within it)"]
    assert Task.objects.count() == 1


@pytest.mark.parametrize("depth", [900, 20_000])
def test_a_deep_envelope_is_one_intake_error_on_every_receive_never_an_exception(
        review_skill, caplog, depth):
    """The probe's envelopes: 900 deep became a task, 20,000 deep a RecursionError logged
    as unexpected on every receive."""
    body = _with_input(_nested(depth))
    message = sqs_message(body)
    caplog.set_level(logging.INFO)

    for receive in (1, 2, 3):
        message["Attributes"]["ApproximateReceiveCount"] = str(receive)
        assert intake_message(message=message) == "invalid"

    error = IntakeError.objects.get()
    assert error.receive_count == 3
    assert error.problems[0].startswith(f"(body): nested {depth + 2:,} deep, more than 65")
    assert not Task.objects.exists()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_the_intake_errors_page_shows_deep_and_large_envelopes(review_skill, admin, client):
    _refused(_with_input(_nested(20_000)))
    _refused(envelope(input={"s": "x" * MAX_INPUT_BYTES}))
    client.force_login(admin)

    page = client.get("/team/intake/")

    assert page.status_code == 200
    assert b"nested 20,002 deep, more than 65" in page.content
    assert b"input: 262,152 bytes, more than the 262,144" in page.content


def test_the_intake_errors_page_cuts_a_long_execution_arn(review_skill, admin, client):
    """An ARN may be 2,048 characters; the page shows 300 and marks the cut."""
    arn = "arn:aws:states:us-east-1:123456789012:execution:sm:" + "run." * 475
    _refused(envelope(execution=arn, skill="no-such-skill"))
    client.force_login(admin)

    page = client.get("/team/intake/").content.decode()

    assert f"{arn[:299]}…" in page
    assert arn[:300] not in page


# Strings PostgreSQL cannot store, numbers its columns cannot hold -----------------------------


@pytest.mark.parametrize(("body", "problem"), [
    (envelope(input={"note": "a\x00b"}), "input.note: must not contain the NUL character"),
    (envelope(title="Review\x00"), "title: must not contain the NUL character"),
    (envelope(input={"a\x00": 1}), "input: a key must not contain the NUL character"),
    (_with_input('"\\ud800"'), "input.x: must be valid Unicode (it holds a lone surrogate)"),
    (envelope(process={"name": "invoice-approval", "version": 2**31}),
     "process.version: must be at most 2147483647"),
    ({"kind": "process-failure/v1", "execution": "arn:x", "error": {"Error": "E"},
      "process": {"name": "p", "version": 10**30}},
     "process.version: must be at most 2147483647"),
    ({"kind": "process-failure/v1", "execution": "arn:x", "error": {"Error": "E\x00"},
      "process": {"name": "p", "version": 1}},
     "error.Error: must not contain the NUL character"),
])
def test_what_postgresql_cannot_store_is_refused_naming_where(review_skill, body, problem):
    """On PostgreSQL each of these failed the insert on every receive (a DataError)."""
    error = _refused(body)

    assert any(p.startswith(problem) for p in error.problems), error.problems
    assert not Task.objects.exists()


def test_a_refused_envelope_keeps_bounded_problems(review_skill, caplog):
    """Unknown field names and input keys are data: a row or log line never holds them whole."""
    body = envelope(input={f"k{n}": "\x00" for n in range(50)})
    body["an unknown field " * 10_000] = 1

    error = _refused(body)

    assert max(len(problem) for problem in error.problems) < 600
    assert any(problem.endswith("… (cut)") for problem in error.problems)
    assert error.problems[-1].startswith("(more)")
    assert len(error.problems) == 12  # the unknown field, ten NULs named, "(more)"
    assert max(len(record.getMessage()) for record in caplog.records) < 20_000


@given(st.text(max_size=300) | st.text(alphabet='[]{}"\\:,1 ', max_size=300))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_reading_any_body_never_raises(body):
    envelope_read(body)
    envelope_read(body * 200)


def test_the_depth_of_json_text_is_measured_outside_its_strings():
    assert [json_depth(text) for text in (
        "1", "[]", '{"a": [1, {"b": []}]}', '"[[["', '["\\"[", "\\\\", [1]]', _nested(50_000),
    )] == [0, 1, 4, 0, 2, 50_000]
    for text in ('{"a": [1, {"b": []}]}', '["\\"[", "\\\\", [1]]', _nested(50)):
        assert json_depth(text) == value_depth(json.loads(text))


# The supervisor board ----------------------------------------------------------------------

_ID = uuid.uuid4()


@pytest.mark.parametrize("query", [
    {"sort": "priority", "after": f"²~{_ID}"},
    {"sort": "priority", "after": f"{'9' * 5000}~{_ID}"},
    {"sort": "priority", "after": f"{'9' * 30}~{_ID}"},
    {"sort": "priority", "after": f"101~{_ID}"},
    {"sort": "deadline", "after": f"0001-01-01T00:00:00+14:00~{_ID}"},
    {"sort": "-created", "after": f"9999-12-31T23:59:59-14:00~{_ID}"},
    {"sort": "deadline", "after": f"2026-13-45T00:00:00~{_ID}"},
    {"sort": "deadline", "after": "x" * 100_000},
])
def test_a_crafted_board_cursor_answers_400_and_shows_the_first_page(
        make_task, supervisor, client, query):
    task = make_task()
    client.force_login(supervisor)

    page = client.get("/supervisor/", query)

    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")
    assert b"That page link is broken: showing the first page." in page.content
    assert [t.pk for t in page.context["tasks"]] == [task.pk]


@pytest.mark.parametrize(("query", "says"), [
    ({"skill": "\x00"}, "'\\x00' is not a skill slug: showing every skill."),
    ({"process": "p" * 5000}, f"'{'p' * 40}…' is not a process name: showing every process."),
    ({"assignee": "ana\x00@example.com"}, "is not a worker's e-mail address"),
    ({"state": "held" * 1000}, f"Unknown state '{'held' * 10}…': showing every state."),
])
def test_a_bad_board_filter_answers_400_naming_it_and_is_dropped(
        make_task, supervisor, client, query, says):
    """A NUL in a filter reached PostgreSQL as a query parameter, which refused it (500)."""
    task = make_task()
    client.force_login(supervisor)

    page = client.get("/supervisor/", query)

    assert page.status_code == 400
    assert any(says in problem for problem in page.context["filters"].problems)
    assert [t.pk for t in page.context["tasks"]] == [task.pk]


_OFFSETS = st.builds(datetime.timezone, st.timedeltas(
    min_value=datetime.timedelta(hours=-23, minutes=-59),
    max_value=datetime.timedelta(hours=23, minutes=59)))
_CURSOR_VALUES = (
    st.text(max_size=40)
    | st.text(alphabet=st.characters(categories=("Nd", "No")), min_size=1, max_size=6)
    | st.integers(min_value=-(10**6), max_value=10**6).map(str)
    | st.datetimes(timezones=_OFFSETS).map(datetime.datetime.isoformat)
)


@given(text=st.text(max_size=120) | st.builds(
    lambda value, pk: f"{value}~{pk}", _CURSOR_VALUES, st.uuids()),
    sort=st.sampled_from(sorted(board.SORTS)))
@example(text=f"²~{_ID}", sort="priority")
@example(text=f"{'9' * 5000}~{_ID}", sort="priority")
@example(text=f"0001-01-01T00:00:00+14:00~{_ID}", sort="deadline")
def test_the_cursor_parser_never_raises_and_gives_values_the_database_takes(text, sort):
    parsed = board._parse_cursor(text, sort=sort)
    if parsed is None:
        return
    value, pk = parsed
    assert str(uuid.UUID(pk)) == pk
    if board.SORTS[sort][0] == "priority":
        assert 0 <= value <= 100
    else:
        assert value.utcoffset() == datetime.timedelta(0)


@given(moment=st.datetimes(timezones=st.timezones()), priority=st.integers(0, 100),
       pk=st.uuids())
def test_a_cursor_the_board_writes_reads_back(moment, priority, pk):
    try:
        utc = moment.astimezone(datetime.UTC)
    except OverflowError:
        return  # a time no row can have: the board never writes it
    # Compared in UTC: aware times in a repeated hour (a fold) are never equal to others.
    assert board._parse_cursor(board._cursor(moment, pk), sort="created") == (utc, str(pk))
    assert board._parse_cursor(board._cursor(priority, pk), sort="priority") == (
        priority, str(pk))


@pytest.mark.parametrize("before", ["²", "9" * 5000, "9" * 30, "-1", "0"])
def test_a_crafted_intake_errors_page_link_answers_400_with_the_newest_errors(
        review_skill, admin, client, before):
    error = _refused("not json")
    client.force_login(admin)

    page = client.get("/team/intake/", {"before": before})

    assert page.status_code == 400
    assert b"That page link is broken" in page.content
    assert [e.pk for e in page.context["errors"]] == [error.pk]
