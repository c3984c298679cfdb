"""config.rows.ModelRows: rows read by hand made into the instances the ORM makes."""

import pytest
from django.db import connection
from django.db.models import signals

from accounts.models import ApiToken, Skill, User
from config.rows import ModelRows
from inbox.models import Task, TaskEvent

HOT = [Task, TaskEvent, User, ApiToken, Skill]  # The models the hot statements read.


def _row(model: type, pk: object, names: list[str]) -> tuple:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in names)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {quote(model._meta.db_table)} "  # noqa: S608
                       f"WHERE {quote(model._meta.pk.column)} = %s",
                       [model._meta.pk.get_db_prep_value(pk, connection)])
        return cursor.fetchone()


def _state(instance: object) -> dict:
    """An instance as the ORM knows it: its values and its state, nothing cached."""
    values = {key: value for key, value in vars(instance).items() if key != "_state"}
    return {"values": values, "adding": instance._state.adding, "db": instance._state.db,
            "deferred": instance.get_deferred_fields(),
            "cached": dict(instance._state.fields_cache)}


@pytest.fixture
def one_of_each(make_task, make_worker, api_token) -> dict[type, object]:
    from inbox.services.worker import task_take_next

    worker = make_worker({"invoice-review": 3})
    api_token(worker)
    make_task()
    task = task_take_next(worker=worker)
    return {Task: task.pk, TaskEvent: TaskEvent.objects.filter(task=task).last().pk,
            User: worker.pk, ApiToken: ApiToken.objects.get(user=worker).pk,
            Skill: task.skill_id}


@pytest.mark.parametrize("model", HOT, ids=lambda model: model.__name__)
def test_a_row_makes_the_instance_the_orm_makes(one_of_each, model):
    """Every column, then a few (the others deferred, as .only() leaves them): the same
    values, state and deferred fields as the ORM's own read, made without __init__."""
    pk = one_of_each[model]
    rows = ModelRows.of(model, connection)
    assert rows.plain  # The hot models take the path without __init__.
    made = rows.instance(_row(model, pk, rows.names), connection)
    assert _state(made) == _state(model.objects.get(pk=pk))
    some = (model._meta.pk.attname, model._meta.concrete_fields[-1].attname)
    rows = ModelRows.of(model, connection, some)
    made = rows.instance(_row(model, pk, rows.names), connection)
    assert _state(made) == _state(model.objects.only(*some).get(pk=pk))
    deferred = next(iter(sorted(made.get_deferred_fields())))
    # A deferred column, asked for, is read as the ORM's instance reads it.
    assert getattr(made, deferred) == getattr(model.objects.get(pk=pk), deferred)
    assert deferred not in made.get_deferred_fields()


def test_a_model_something_listens_to_is_made_by_its_from_db(one_of_each):
    """A post_init receiver (or pre_init, or a model with its own __init__ or from_db)
    sees every instance: such a model's rows go through from_db."""
    made = []

    def note(sender, instance, **kwargs):
        made.append(instance)

    signals.post_init.connect(note, sender=Skill)
    try:
        rows = ModelRows(Skill, connection)
        assert not rows.plain
        skill = rows.instance(_row(Skill, one_of_each[Skill], rows.names), connection)
    finally:
        signals.post_init.disconnect(note, sender=Skill)
    assert made == [skill]
    assert _state(skill) == _state(Skill.objects.get(pk=one_of_each[Skill]))
