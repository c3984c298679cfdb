"""Write the changed columns of many rows of one table in one statement.

Django's ``bulk_update`` builds a ``CASE WHEN pk = ... THEN ...`` expression per row and
column and resolves each one, which costs about a millisecond of CPU per row for a task's
four or five columns: more than everything else a batch of transitions does. On
PostgreSQL ``rows_update`` sends one ``UPDATE ... FROM unnest(...)`` instead, one array
parameter per column (the statement's text is the same for any number of rows), the values
prepared by each field as Django would save them; elsewhere (SQLite) it is
``bulk_update``.
"""

from collections.abc import Sequence

from django.db import connection, models


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
    # Each array cast to its column's type: an array of NULLs alone would have none.
    arrays = ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in columns)
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
