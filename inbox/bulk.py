"""Write many rows of one table in one statement: their changed columns, or new rows.

Django's ``bulk_update`` builds a ``CASE WHEN pk = ... THEN ...`` expression per row and
column and resolves each one, which costs about a millisecond of CPU per row for a task's
four or five columns: more than everything else a batch of transitions does. On
PostgreSQL ``rows_update`` sends one ``UPDATE ... FROM unnest(...)`` instead, one array
parameter per column (the statement's text is the same for any number of rows), the values
prepared by each field as Django would save them; elsewhere (SQLite) it is
``bulk_update``.

``rows_insert`` does the same for new rows: Django's ``bulk_create`` cannot use its own
``unnest`` form for a table with a binary column (the task's encrypted token), so it writes
a ``VALUES`` row per instance, a statement whose text changes with the number of rows and
whose parameters (45 a task) pass psycopg's cache limit, so both Django's compiler and
psycopg's parser went through it again on every intake receive.

``row_insert`` and ``row_update`` are the one-row forms every transition writes (its event,
its outbox row, the task's changed columns): the statement that save() and
QuerySet.update() compile on each call (a third of a millisecond of CPU each, three times
the statement's own cost) is written once per model and columns, and run with each row's
values as save() prepares them. ``row_update_inserting`` sends a conditional update and the
rows that go with it in one round trip on PostgreSQL.
"""

import functools
from collections.abc import Sequence

from django.db import DatabaseError, connection, models

from config.rows import update_where, update_where_statement


def rows_update(model: type[models.Model], rows: Sequence[models.Model],
                fields: Sequence[str]) -> None:
    """Write fields (names, as bulk_update takes them) of each row, found by primary key."""
    if not rows or not fields:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_update(rows, fields)
        return
    meta, quote = model._meta, connection.ops.quote_name
    columns = [meta.pk, *(meta.get_field(name) for name in fields)]
    names = [quote(field.column) for field in columns]
    arrays = ", ".join(f"%s::{_array_type(field)}" for field in columns)
    sets = ", ".join(f"{name} = v.{name}" for name in names[1:])
    with connection.cursor() as cursor:
        cursor.execute(
            # Only the model's own names are formatted in; every value is a parameter.
            f"UPDATE {quote(meta.db_table)} AS t SET {sets} "  # noqa: S608
            f"FROM unnest({arrays}) AS v ({', '.join(names)}) "
            f"WHERE t.{names[0]} = v.{names[0]}",
            [[field.get_db_prep_save(getattr(row, field.attname), connection) for row in rows]
             for field in columns],
        )


def rows_insert(model: type[models.Model], rows: Sequence[models.Model]) -> None:
    """Insert new rows, as bulk_create would: each with its primary key set in Python, or
    all of them without one where the database makes the key (an auto field: the keys
    come back by RETURNING, in the rows' order, as bulk_create relies on too, and are set
    on the rows).

    On PostgreSQL one ``INSERT ... SELECT * FROM unnest(...)``, one array per column, the
    values prepared by each field as Django saves them (``pre_save`` first: the
    auto_now_add clocks); elsewhere (SQLite), or when a value is an SQL expression, it is
    ``bulk_create``. The rows are saved instances afterwards, as bulk_create leaves them.
    """
    if not rows:
        return
    meta = model._meta
    keyless = [row.pk is None for row in rows]
    made = all(keyless) and meta.pk.db_returning
    if any(keyless) and not made:
        raise ValueError(f"rows_insert: every {model.__name__} needs its primary key set")
    if connection.vendor != "postgresql":
        model.objects.bulk_create(rows)
        return
    fields = [field for field in meta.concrete_fields if not (made and field is meta.pk)]
    arrays = [[field.get_db_prep_save(field.pre_save(row, True), connection) for row in rows]
              for field in fields]
    if any(hasattr(value, "as_sql") for values in arrays for value in values):
        model.objects.bulk_create(rows)  # a database default or an expression: Django's way
        return
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(model, made), arrays)
        keys = [key for key, in cursor.fetchall()] if made else None
    if keys is not None and len(keys) != len(rows):
        raise DatabaseError(f"rows_insert: {len(rows)} {model.__name__} rows sent, "
                            f"{len(keys)} keys answered")
    for n, row in enumerate(rows):
        if keys is not None:
            setattr(row, meta.pk.attname, keys[n])
        row._state.adding, row._state.db = False, connection.alias


@functools.cache
def _insert_sql(model: type[models.Model], made: bool = False) -> str:
    """The insert statement of rows_insert for model (PostgreSQL), written once a process;
    made: without the key column, each key the database made answered."""
    meta, quote = model._meta, connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not (made and field is meta.pk)]
    names = ", ".join(quote(field.column) for field in fields)
    arrays = ", ".join(f"%s::{_array_type(field)}" for field in fields)
    back = f" RETURNING {quote(meta.pk.column)}" if made else ""
    # Only the model's own names are formatted in; every value is a parameter.
    return (f"INSERT INTO {quote(meta.db_table)} ({names}) "  # noqa: S608
            f"SELECT * FROM unnest({arrays}){back}")


def _array_type(field: models.Field) -> str:
    """The type of a column's array parameter: an array of _cast_type's. Cast to it because
    an array of NULLs alone would have no type."""
    return f"{_cast_type(field)}[]"


def _cast_type(field: models.Field) -> str:
    """The type a parameter for field's column is cast to: the column's own, without its
    length (varchar, not varchar(64)), because an explicit cast to varchar(n) cuts a longer
    value short without a word, where writing it to the column refuses it, as save() would.
    """
    return field.db_type(connection).split("(")[0]


def row_insert(row: models.Model) -> None:
    """Insert one new row as row.save(force_insert=True) does (no signals are sent: none is
    connected to the models written here). A key the database makes comes back by
    RETURNING and is set on the row, as save() sets it."""
    auto, values = _insert_prepared(row)
    if (auto is not None and not connection.features.can_return_columns_from_insert) or any(
            hasattr(value, "as_sql") for value in values):
        row.save(force_insert=True)  # a database default or an expression: Django's way
        return
    with connection.cursor() as cursor:
        cursor.execute(_row_insert_sql(type(row), connection.vendor, auto is not None), values)
        _inserted(row, auto, cursor.fetchone()[0] if auto is not None else None)


def _insert_prepared(row: models.Model) -> tuple[models.Field | None, list]:
    """Return the key field whose value the database makes for row (None when row has its
    key already) and the values of every other column, as save() prepares them."""
    meta = row._meta
    auto = meta.pk if row.pk is None and meta.pk.db_returning else None
    fields = [field for field in meta.concrete_fields if field is not auto]
    return auto, [field.get_db_prep_save(field.pre_save(row, True), connection)
                  for field in fields]


def _inserted(row: models.Model, auto: models.Field | None, key: object) -> None:
    """Mark row as saved, as save() does, with the key the database made (if auto)."""
    if auto is not None:
        setattr(row, auto.attname, key)
    row._state.adding, row._state.db = False, connection.alias


def rows_insert_each(*rows: models.Model) -> None:
    """Insert rows, each as row_insert inserts it, in one round trip on PostgreSQL: one
    WITH of an INSERT per row (a transition's event and its outbox row), each key the
    database makes coming back and set on its row. Elsewhere, or when a value is an
    expression, row_insert each, in order."""
    prepared = ([_insert_prepared(row) for row in rows]
                if connection.vendor == "postgresql" else None)
    if prepared is None or any(hasattr(value, "as_sql") for _, values in prepared
                               for value in values):
        for row in rows:
            row_insert(row)
        return
    shape = tuple((type(row), auto is not None)
                  for row, (auto, _) in zip(rows, prepared, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(_rows_insert_each_sql(shape),
                       [value for _, values in prepared for value in values])
        keys = cursor.fetchone()
    for row, (auto, _), key in zip(rows, prepared, keys, strict=True):
        _inserted(row, auto, key)


@functools.cache
def _rows_insert_each_sql(shape: tuple[tuple[type[models.Model], bool], ...]) -> str:
    """rows_insert_each's statement: row_insert's INSERT of each (model, key made by the
    database) in shape, each in a WITH of its own, every row's key answered in one row."""
    quote = connection.ops.quote_name
    parts = []
    for n, (model, returning) in enumerate(shape):
        insert = _row_insert_sql(model, "postgresql", returning)
        if not returning:  # A key given: answered all the same, so each WITH has a row.
            insert += f" RETURNING {quote(model._meta.pk.column)}"
        parts.append(f"r{n} AS ({insert})")
    # Only the models' own names are formatted in; every value is a parameter.
    keys = ", ".join(f"(SELECT * FROM r{n})" for n in range(len(shape)))  # noqa: S608
    return f"WITH {', '.join(parts)} SELECT {keys}"


@functools.cache
def _row_insert_sql(model: type[models.Model], vendor: str, returning: bool) -> str:
    """row_insert's statement for model: every column but a key the database makes."""
    meta, quote = model._meta, connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not (returning and field is meta.pk)]
    names = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    back = f" RETURNING {quote(meta.pk.column)}" if returning else ""
    # Only the model's own names are formatted in; every value is a parameter.
    return f"INSERT INTO {quote(meta.db_table)} ({names}) VALUES ({marks}){back}"  # noqa: S608


def row_update(row: models.Model, fields: Sequence[str], **where: object) -> int:
    """Write fields (names, as save(update_fields=...) takes them) of one row, found by its
    primary key and, if given, where's columns equal to where's values (the version a
    conditional update was decided on); return how many rows changed (0 or 1)."""
    meta = row._meta
    return update_where(type(row),
                        {name: meta.get_field(name).pre_save(row, False) for name in fields},
                        {meta.pk.name: row.pk, **where})


def row_update_inserting(row: models.Model, fields: Sequence[str],
                         inserts: Sequence[models.Model], **where: object) -> int:
    """row_update, and only if it changed the row, rows_insert_each(*inserts); return how
    many rows the update changed (0 or 1: with 0 nothing is inserted).

    On PostgreSQL one round trip: the UPDATE in a WITH, each insert a WITH of its own that
    selects its row's values from the UPDATE's answer, so it writes a row only if the
    update did (a transition conditioned on the version it saw: its event and outbox row).
    Elsewhere, or when a value is an expression, the two in turn.
    """
    prepared = ([_insert_prepared(insert) for insert in inserts]
                if connection.vendor == "postgresql" else None)
    if prepared is None or any(hasattr(value, "as_sql") for _, values in prepared
                               for value in values):
        written = row_update(row, fields, **where)
        if written == 1:
            rows_insert_each(*inserts)
        return written
    meta = row._meta
    update, params = update_where_statement(
        type(row), {name: meta.get_field(name).pre_save(row, False) for name in fields},
        {meta.pk.name: row.pk, **where})
    shape = tuple((type(insert), auto is not None)
                  for insert, (auto, _) in zip(inserts, prepared, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(_update_inserting_sql(update, shape),
                       params + [value for _, values in prepared for value in values])
        written, *keys = cursor.fetchone()
    if written == 1:
        for insert, (auto, _), key in zip(inserts, prepared, keys, strict=True):
            _inserted(insert, auto, key)
    return written


@functools.cache
def _update_inserting_sql(update: str, shape: tuple[tuple[type[models.Model], bool], ...]
                          ) -> str:
    """row_update_inserting's statement: update (update_where's) and, for each (model, key
    made by the database) in shape, an INSERT of one row selected from the update's answer;
    it answers the rows updated and each insert's key (NULL: none inserted)."""
    quote = connection.ops.quote_name
    parts = [f"u AS ({update} RETURNING 1)"]
    for n, (model, returning) in enumerate(shape):
        meta = model._meta
        fields = [field for field in meta.concrete_fields
                  if not (returning and field is meta.pk)]
        names = ", ".join(quote(field.column) for field in fields)
        # Each value cast to its column's type: selected, unlike VALUES, a parameter takes
        # no type from the column it goes to.
        values = ", ".join(f"%s::{_cast_type(field)}" for field in fields)
        # Only the models' own names are formatted in; every value is a parameter.
        parts.append(f"r{n} AS (INSERT INTO {quote(meta.db_table)} ({names}) "  # noqa: S608
                     f"SELECT {values} FROM u RETURNING {quote(meta.pk.column)})")
    keys = "".join(f", (SELECT * FROM r{n})" for n in range(len(shape)))  # noqa: S608
    return f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM u){keys}"  # noqa: S608
