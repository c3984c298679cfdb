"""Write the changed columns of many rows of one table in one statement.

Django's ``bulk_update`` builds a ``CASE WHEN pk = ... THEN ...`` expression per row and
column and resolves each one, which costs about a millisecond of CPU per row for a task's
four or five columns: more than everything else a batch of transitions does. On
PostgreSQL ``rows_update`` sends one ``UPDATE ... FROM (VALUES ...)`` instead, the values
prepared by each field as Django would save them; elsewhere (SQLite) it is
``bulk_update``.
"""

from collections.abc import Sequence

from django.db import connection, models

# PostgreSQL takes at most 65,535 parameters in one statement.
_MAX_PARAMETERS = 65_000


def rows_update(model: type[models.Model], rows: Sequence[models.Model],
                fields: Sequence[str]) -> None:
    """Write fields (names, as bulk_update takes them) of each row, found by primary key.

    One statement per 65,000 parameters (one, for any batch a transition makes).
    """
    if not rows or not fields:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_update(rows, fields)
        return
    meta, quote = model._meta, connection.ops.quote_name
    key = meta.pk
    columns = [key, *(meta.get_field(name) for name in fields)]
    names = ", ".join(quote(field.column) for field in columns)
    # Each value cast to its column's type: VALUES alone would guess text (or fail on NULL).
    row_sql = "(" + ", ".join(f"%s::{field.db_type(connection)}" for field in columns) + ")"
    sets = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}"
                     for field in columns[1:])
    table = quote(meta.db_table)
    per_statement = max(1, _MAX_PARAMETERS // len(columns))
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start:start + per_statement]
            params = [field.get_db_prep_save(getattr(row, field.attname), connection)
                      for row in chunk for field in columns]
            cursor.execute(
                f"UPDATE {table} AS t SET {sets} FROM (VALUES "  # noqa: S608
                f"{', '.join([row_sql] * len(chunk))}) AS v ({names}) "
                f"WHERE t.{quote(key.column)} = v.{quote(key.column)}",
                params,
            )
