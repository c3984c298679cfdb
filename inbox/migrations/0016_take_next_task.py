"""Take next does only what its caller needs: the history only when asked, as JSON text.

inbox_take_next_task is 0012's inbox_take_next_history with three changes, each measured
(docs/BENCHMARKS.md, "Take next without the history it does not need"):

- p_history: the history is read and answered only when the caller shows it (the API's
  answer, the page swapped in place). The page's take redirects to the task's page, which
  reads the history there, and a script's take reads none: neither pays for it. Without
  it, taken_history is NULL.
- The history is json, not jsonb: the caller reads it as text, and jsonb was built only to
  be printed again.
- p_now_iso: the moment as Python's isoformat() writes it, for the hash, where the
  function formatted it again; the work deadline is formatted once, for the hash and the
  event's data both.

Everything else is 0012's: the same checks, the same change, the same event and chain.
tests/inbox/test_take_next_sql.py proves it writes what the Python path writes and that
the history it answers is the one stored.

A new name, as 0012's was: during a rolling deploy the processes still on the code before
this one call inbox_take_next_history as they know it. That one stays until a later
release drops it.
"""

from django.db import migrations

SIGNATURE = ("inbox_take_next_task(bigint, text, timestamptz, text, text, text, boolean, "
             "boolean)")

CREATE = """
CREATE OR REPLACE FUNCTION inbox_take_next_task(
    p_worker bigint, p_skill text, p_now timestamptz, p_now_iso text, p_label text,
    p_label_json text, p_signal boolean, p_history boolean
) RETURNS TABLE (taken inbox_task, taken_history json)
LANGUAGE plpgsql ROWS 1 AS $$
DECLARE
    v_free integer;
    v_task inbox_task;
    v_prev text;
    v_deadline timestamptz;
    v_deadline_iso text;
    v_hash text;
    v_event bigint;
BEGIN
    -- The worker's row lock queues everything that adds to their load (their own takes,
    -- an offer, a reassign to them): the capacity weighed below still holds at commit.
    -- Active, with the worker role (a superuser holds every role): as hold_problem asks.
    SELECT u.capacity INTO v_free FROM accounts_user u
     WHERE u.id = p_worker AND u.is_active
       AND (u.is_superuser OR EXISTS (
            SELECT 1 FROM accounts_user_groups ug JOIN auth_group g ON g.id = ug.group_id
             WHERE ug.user_id = u.id AND g.name = 'worker'))
       FOR UPDATE OF u;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- A statement of its own, after the lock: its snapshot sees every take committed
    -- while this one waited for the worker's row (a subquery of the locking statement
    -- would weigh the load as it was before the wait).
    SELECT v_free - COALESCE(sum(s.weight), 0) INTO v_free
      FROM inbox_task t JOIN accounts_skill s ON s.id = t.skill_id
     WHERE t.assignee_id = p_worker AND t.state IN ('offered', 'in_progress');

    -- Each eligible pull queue's head, SKIP LOCKED (a concurrent taker's row is passed
    -- over, never waited for), through the queue-order index; the best of them is taken.
    -- The heads not taken stay locked only until this statement's transaction ends.
    SELECT c.* INTO v_task
      FROM accounts_workerskill ws
      JOIN accounts_skill s ON s.id = ws.skill_id
     CROSS JOIN LATERAL (
        SELECT t.* FROM inbox_task t
         WHERE t.skill_id = ws.skill_id AND t.state = 'queued'
           AND t.min_proficiency <= ws.proficiency
           AND (t.exclude_workers_of = '[]'::jsonb OR NOT EXISTS (
                SELECT 1 FROM inbox_task o
                 WHERE o.execution_arn = t.execution_arn AND o.assignee_id = p_worker
                   AND o.stage IN (SELECT jsonb_array_elements_text(t.exclude_workers_of))))
         ORDER BY t.priority DESC, t.created_at
         LIMIT 1
           FOR UPDATE OF t SKIP LOCKED) c
     WHERE ws.worker_id = p_worker AND s.dispatch = 'pull' AND s.weight <= v_free
       AND (p_skill IS NULL OR s.slug = p_skill)
     ORDER BY c.priority DESC, c.created_at
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    v_prev := v_task.chain_head;
    v_deadline := p_now + make_interval(secs => v_task.work_seconds);
    v_deadline_iso := inbox_isoformat(v_deadline);
    -- inbox.history.event_hash: [prev, task, version, action, from, to, actor, reason,
    -- data, at] as compact JSON with sorted keys; the actor comes JSON-encoded by Python.
    v_hash := encode(sha256(convert_to(
        '["' || v_prev || '","' || v_task.id::text || '",' || (v_task.version + 1)::text
        || ',"take_next","queued","in_progress",' || p_label_json || ',"",'
        || '{"work_deadline":"' || v_deadline_iso || '"},"' || p_now_iso || '"]',
        'UTF8')), 'hex');
    UPDATE inbox_task
       SET state = 'in_progress', assignee_id = p_worker, offer_deadline = NULL,
           work_deadline = v_deadline, version = version + 1, chain_head = v_hash
     WHERE id = v_task.id
    RETURNING * INTO v_task;
    INSERT INTO inbox_taskevent (task_id, version, action, from_state, to_state, actor_id,
                                 actor_label, reason, data, at, prev_hash, hash)
    VALUES (v_task.id, v_task.version, 'take_next', 'queued', 'in_progress', p_worker,
            p_label, '', jsonb_build_object('work_deadline', v_deadline_iso),
            p_now, v_prev, v_hash)
    RETURNING id INTO v_event;
    IF p_signal THEN
        INSERT INTO inbox_signaloutbox (event_id, task_id, version, attempts,
                                        next_attempt_at, sent_at, last_error)
        VALUES (v_event, v_task.id, v_task.version, 0, p_now, NULL, '');
    END IF;
    taken := v_task;
    IF p_history THEN
        -- The task's history as the take left it, for the answer (this statement sees the
        -- event just appended; the caller's statement, begun before it, would not): each
        -- event's columns in inbox.history.HISTORY_COLUMNS' order.
        SELECT json_agg(json_build_array(e.id, e.version, e.action, e.from_state,
                                         e.to_state, e.actor_id, e.actor_label, e.reason,
                                         e.data, e.at, e.prev_hash, e.hash)
                        ORDER BY e.version)
          INTO taken_history
          FROM inbox_taskevent e WHERE e.task_id = v_task.id;
    END IF;
    RETURN NEXT;
END;
$$;
"""


def _on_postgresql(*sqls: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for sql in sqls:
                # No parameters: a % in the function body is SQL, not a placeholder.
                schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):
    dependencies = [("inbox", "0015_outbox_wakeup")]

    operations = [
        migrations.RunPython(
            _on_postgresql(CREATE),
            _on_postgresql(f"DROP FUNCTION IF EXISTS {SIGNATURE}"),
            elidable=False),
    ]
