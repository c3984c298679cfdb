"""The clocks' rows of the transition table, applied by PostgreSQL: one statement a batch.

The sweeper's batches (inbox.services.clock) change hundreds of tasks a second. In
Python each task costs a model instance, an event, a hash and their rows' values prepared
for the driver (bench/sweeper.py's profile: two thirds of a backlog sweep). Here one
statement per clock locks a batch of its due rows (SKIP LOCKED, earliest deadline first),
changes them as the table's row does, appends each task's hash-chained event (the hash
computed as inbox.history.event_hash computes it), and writes the passes, outbox rows and
signal rows that go with them; it answers one short row per task changed, for the effects
and the log. inbox.lifecycle.clock_rows_applied runs it; SQLite keeps the Python path
(inbox.lifecycle.transitions_apply), and tests/inbox/test_clock_sql.py proves both write
the same rows and the same chain.

A statement, not a function installed by a migration (as take next's is): nothing to
version during a rolling deploy, and the states, actions and labels are the table's own,
formatted in when this module is first used (statements()). Each state literal stays in
the statement's text, not a parameter: the due rows are found through the clocks'
partial indexes, whose conditions a generic plan can only match against literals.

What each change does mirrors its function in inbox.lifecycle (_lapsed, _to_queue,
_escalated, _aborted) and inbox.lifecycle._change (holder_before, version, event);
test_clock_sql.py's test_the_statements_are_the_tables_rows names the functions, so a
change to one of them fails until this module follows.
"""

from collections.abc import Mapping
from typing import Any

# The event's hash: inbox.history.event_hash's compact JSON with sorted keys of [prev,
# task, version, action, from, to, actor, reason, data, at]. The reason and the actor come
# JSON-encoded (as Python encodes them), the data is built below, at is Python's isoformat.
_HASH = """encode(sha256(convert_to(
    '["' || {prev} || '","' || {task}::text || '",' || {version}::text || ',"'
    || {action} || '","' || {from_state} || '","' || {to_state} || '",' || {actor_json}
    || ',' || {reason_json} || ',' || {data} || ',"' || %(at_iso)s::text || '"]',
    'UTF8')), 'hex')"""

# _change's data for a task taken from its holder: {"holder_before": <their id>}.
_HOLDER_BEFORE = """CASE WHEN {holder} IS NULL THEN '{{}}'
    ELSE '{{"holder_before":' || {holder}::text || '}}' END"""

# The signal rows of the events just appended, when a bus is set (_signals_write).
_SIGNALS = """signals AS (
    INSERT INTO inbox_signaloutbox (event_id, task_id, version, attempts, next_attempt_at,
                                    sent_at, last_error)
    SELECT e.id, e.task_id, e.version, 0, %(at)s::timestamptz, NULL, '' FROM events e
     WHERE %(signal)s::boolean
)"""

_EVENTS = """events AS (
    INSERT INTO inbox_taskevent (task_id, version, action, from_state, to_state, actor_id,
                                 actor_label, reason, data, at, prev_hash, hash)
    SELECT h.id, h.next_version, {action}, {from_state}, {to_state}, NULL, %(label)s::text,
           {reason}, h.data::jsonb, %(at)s::timestamptz, h.chain_head, h.hash
      FROM hashed h
    RETURNING id, task_id, version
)"""


def duration_sql(seconds: str) -> str:
    """SQL for inbox.services.clock._duration of a number of seconds: "2 h", "5 min", "7 s"."""
    return (f"CASE WHEN mod({seconds}, 3600) = 0 THEN ({seconds} / 3600)::text || ' h' "
            f"WHEN mod({seconds}, 60) = 0 THEN ({seconds} / 60)::text || ' min' "
            f"ELSE {seconds}::text || ' s' END")


def _literal(value: str) -> str:
    """A state's or action's name as an SQL literal (the table's names: letters and _)."""
    if not value.replace("_", "").isalpha():
        raise ValueError(f"{value!r} is not a name this module writes into SQL")
    return f"'{value}'"


def _limit(batch: int) -> int:
    """The batch as the statement's LIMIT: a literal, not a parameter. A prepared statement's
    generic plan would guess a tenth of the due rows for LIMIT $n, and write them with a hash
    join over every task (a scan of the whole table each sweep); the literal's 200 rows are
    written through the primary key."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"a batch is a positive number of rows, not {batch!r}")
    return batch


def back_to_queue(*, action: str, source: str, target: str, column: str,
                  lapse_pass: bool, batch: int) -> str:
    """The statement of a clock that sends held tasks back to their queue (offer, work).

    _to_queue's change (nobody holds it, no offer or work clock runs), and for a lapsed
    offer _lapsed's pass: the worker is offered the task again only after a cool-down (an
    earlier lapse's pass is renewed; a decline's stays as it is). Parameters: due, at,
    at_iso, label, label_json, reason, reason_json, signal, pass_why, pass_reason.
    """
    act, src, dst = _literal(action), _literal(source), _literal(target)
    limit = _limit(batch)
    passes = """, passes AS (
    INSERT INTO inbox_taskpass (task_id, worker_id, why, reason, at)
    SELECT h.id, h.assignee_id, %(pass_why)s::text, %(pass_reason)s::text,
           %(at)s::timestamptz
      FROM hashed h
        ON CONFLICT (task_id, worker_id) DO UPDATE SET at = EXCLUDED.at
     WHERE inbox_taskpass.why = EXCLUDED.why
)""" if lapse_pass else ""
    hashed = _HASH.format(prev="s.chain_head", task="s.id", version="s.next_version",
                          action=act, from_state=src, to_state=dst,
                          actor_json="%(label_json)s::text",
                          reason_json="%(reason_json)s::text", data="s.data")
    # Only the table's names and the model's columns are formatted in; values are parameters.
    return f"""
WITH due AS MATERIALIZED (
    SELECT t.id, t.version, t.chain_head, t.assignee_id, t.skill_id
      FROM inbox_task t
     WHERE t.state = {src} AND t.{column} <= %(due)s::timestamptz
     ORDER BY t.{column}
     LIMIT {limit}
       FOR UPDATE OF t SKIP LOCKED
), step AS MATERIALIZED (
    SELECT d.*, d.version + 1 AS next_version,
           {_HOLDER_BEFORE.format(holder="d.assignee_id")} AS data
      FROM due d
), hashed AS MATERIALIZED (
    SELECT s.*, {hashed} AS hash FROM step s
), written AS (
    UPDATE inbox_task t
       SET state = {dst}, assignee_id = NULL, offer_deadline = NULL, work_deadline = NULL,
           version = h.next_version, chain_head = h.hash
      FROM hashed h
     WHERE t.id = h.id
), {_EVENTS.format(action=act, from_state=src, to_state=dst, reason="%(reason)s::text")}
{passes}, {_SIGNALS}
SELECT h.id, {act}, {src}, {dst}, k.dispatch, NULL::bigint
  FROM hashed h JOIN accounts_skill k ON k.id = h.skill_id
"""  # noqa: S608


def overall(*, escalate: str, abort: str, sources: tuple[str, ...], escalated_state: str,
            aborting_state: str, failure_kind: str, pending: str, batch: int) -> str:
    """The statement of the overall clock: escalate once where the policy says so, else abort.

    _escalated's change (nobody holds it; the escalation clock, from the sweep's since,
    replaces the overall one) for a task whose policy is escalate and that never escalated;
    _aborted's (the reason kept; offer, work and heartbeat clocks stop) and _timeout's
    outbox row for the others. Parameters: due, since, at, at_iso, label,
    label_json, signal, escalated, escalated_json, ran_out, ran_out_json, abort,
    abort_json (with {duration} for the task's overall seconds), error, cause_max.
    """
    esc, abt = _literal(escalate), _literal(abort)
    limit = _limit(batch)
    to_esc, to_abt = _literal(escalated_state), _literal(aborting_state)
    states = ", ".join(_literal(state) for state in sources)
    duration = duration_sql("s.overall_seconds")
    hashed = _HASH.format(prev="s.chain_head", task="s.id", version="s.next_version",
                          action="s.action", from_state="s.state", to_state="s.to_state",
                          actor_json="%(label_json)s::text", reason_json="s.reason_json",
                          data="s.data")
    # Only the table's names and the model's columns are formatted in; values are parameters.
    return f"""
WITH due AS MATERIALIZED (
    SELECT t.id, t.state, t.version, t.chain_head, t.assignee_id, t.skill_id, t.on_timeout,
           t.overall_seconds, t.escalation_seconds
      FROM inbox_task t
     WHERE t.state IN ({states}) AND t.overall_deadline <= %(due)s::timestamptz
     ORDER BY t.overall_deadline
     LIMIT {limit}
       FOR UPDATE OF t SKIP LOCKED
), seen AS MATERIALIZED (
    -- Once only: a task that escalated before is aborted when its clock runs out again.
    -- A lateral probe per task through its events' (task, version) index: as EXISTS,
    -- the planner may hash every escalation of the table instead, each sweep.
    SELECT d.*, d.version + 1 AS next_version, x.one IS NOT NULL AS escalated
      FROM due d
      LEFT JOIN LATERAL (SELECT 1 AS one FROM inbox_taskevent e
                          WHERE e.task_id = d.id AND e.action = {esc} LIMIT 1) x ON true
), step AS MATERIALIZED (
    SELECT s.*, (s.on_timeout = 'escalate' AND NOT s.escalated) AS escalating FROM seen s
), said AS MATERIALIZED (
    SELECT s.*,
           CASE WHEN s.escalating THEN {esc} ELSE {abt} END AS action,
           CASE WHEN s.escalating THEN {to_esc} ELSE {to_abt} END AS to_state,
           CASE WHEN s.escalating THEN %(escalated)s::text
                WHEN s.escalated THEN %(ran_out)s::text
                ELSE replace(%(abort)s::text, '{{duration}}', {duration}) END AS reason,
           CASE WHEN s.escalating THEN %(escalated_json)s::text
                WHEN s.escalated THEN %(ran_out_json)s::text
                ELSE replace(%(abort_json)s::text, '{{duration}}', {duration}) END AS reason_json,
           CASE WHEN s.escalating THEN {_HOLDER_BEFORE.format(holder="s.assignee_id")}
                ELSE '{{}}' END AS data
      FROM step s
), hashed AS MATERIALIZED (
    SELECT s.*, {hashed} AS hash FROM said s
), written AS (
    UPDATE inbox_task t
       SET state = h.to_state,
           assignee_id = CASE WHEN h.escalating THEN NULL ELSE t.assignee_id END,
           offer_deadline = NULL, work_deadline = NULL,
           overall_deadline = CASE WHEN h.escalating
               THEN %(since)s::timestamptz
                    + make_interval(secs => COALESCE(h.escalation_seconds, 0))
               ELSE t.overall_deadline END,
           next_heartbeat_at = CASE WHEN h.escalating THEN t.next_heartbeat_at END,
           reason = CASE WHEN h.escalating THEN t.reason ELSE h.reason END,
           version = h.next_version, chain_head = h.hash
      FROM hashed h
     WHERE t.id = h.id
), {_EVENTS.format(action="h.action", from_state="h.state", to_state="h.to_state",
                   reason="h.reason")}
, outbox AS (
    INSERT INTO inbox_outbox (task_id, decision_version, kind, output, error, cause, status,
                              attempts, next_attempt_at, last_error, created_at, sent_at)
    SELECT h.id, h.next_version, {_literal(failure_kind)}, NULL, %(error)s::text,
           left(h.reason, %(cause_max)s::integer), {_literal(pending)}, 0,
           %(at)s::timestamptz, '', %(at)s::timestamptz, NULL
      FROM hashed h
     WHERE NOT h.escalating
    RETURNING id, task_id
), {_SIGNALS}
SELECT h.id, h.action, h.state, h.to_state, k.dispatch, o.id
  FROM hashed h JOIN accounts_skill k ON k.id = h.skill_id
  LEFT JOIN outbox o ON o.task_id = h.id
"""  # noqa: S608


def statements(rows: Mapping[str, Any], *, failure_kind: str, pending: str, batch: int
               ) -> dict[str, str]:
    """Return each clock's statement (offer, work, overall) from the table's rows, for
    batches of at most batch tasks.

    rows: inbox.lifecycle.TRANSITIONS (its clocks' rows are read); failure_kind and pending:
    the outbox row's kind and status for an abort (OutboxKind.FAILURE, OutboxStatus.PENDING).
    """
    offer, work = rows["offer_timeout"], rows["work_timeout"]
    escalate, abort = rows["escalate"], rows["overall_timeout"]
    return {
        "offer": back_to_queue(action=offer.action, source=offer.sources[0],
                               target=offer.target, column="offer_deadline",
                               lapse_pass=True, batch=batch),
        "work": back_to_queue(action=work.action, source=work.sources[0], target=work.target,
                              column="work_deadline", lapse_pass=False, batch=batch),
        "overall": overall(escalate=escalate.action, abort=abort.action,
                           sources=abort.sources, escalated_state=escalate.target,
                           aborting_state=abort.target, failure_kind=failure_kind,
                           pending=pending, batch=batch),
    }
