"""Model instances of rows read by hand, made as the ORM makes them.

For the few hot statements written in SQL (the take-next function's answer, an API token's
sign-in): each value goes through the converters the ORM would apply to its column (the
backend's, then the field's, e.g. JSON text to Python), then Model.from_db.
"""

import functools
from collections.abc import Mapping
from typing import Any

from django.db import connection
from django.db.models import signals
from django.db.models.base import Model, ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute


class ModelRows:
    """Makes one model's instances of its concrete columns, in the model's field order, or
    of some of them (names): the others deferred, read when first asked, as .only() leaves
    them."""

    # Per model, database and columns: the converters are the vendor's; the connection
    # each one is given is the caller's own (connections are per thread).
    _made: dict[tuple[type, str, tuple[str, ...] | None], "ModelRows"] = {}

    def __init__(self, model: type, connection: Any,
                 names: tuple[str, ...] | None = None) -> None:
        self.model, self.alias = model, connection.alias
        fields = [field for field in model._meta.concrete_fields
                  if names is None or field.attname in names]
        if names is not None and len(fields) != len(names):
            unknown = set(names) - {field.attname for field in fields}
            raise ValueError(f"{model.__name__} has no concrete columns {sorted(unknown)}.")
        self.names = [field.attname for field in fields]
        self.width = len(fields)
        # Model.__init__ sets each value through setattr, sends pre_init and post_init, and
        # for a model whose class keeps it as Model's, whose columns are plain attributes
        # (each the ORM's DeferredAttribute, or its foreign key's kind, which on a new
        # instance only stores the value) and which nothing listens to, that is exactly
        # filling the instance's __dict__, at less than half of from_db's cost (the receivers
        # are looked at here, once: they connect when the apps are ready, before any row).
        # tests/config/test_rows.py compares the instances with the ORM's.
        self.plain = (
            model.__init__ is Model.__init__ and model.from_db.__func__ is Model.from_db.__func__
            and all(type(model.__dict__.get(name)) in _PLAIN_ATTRIBUTES for name in self.names)
            and not signals.pre_init.has_listeners(model)
            and not signals.post_init.has_listeners(model))
        self.converters = []
        for field in fields:
            column = field.get_col(model._meta.db_table)
            self.converters.append((column, [*connection.ops.get_db_converters(column),
                                             *field.get_db_converters(connection)]))

    @classmethod
    def of(cls, model: type, connection: Any,
           names: tuple[str, ...] | None = None) -> "ModelRows":
        key = (model, connection.alias, names)
        if key not in cls._made:
            cls._made[key] = cls(model, connection, names)
        return cls._made[key]

    def instance(self, values: tuple[Any, ...], connection: Any) -> Any:
        """Return the instance of one row's values (its columns, in the model's order)."""
        converted = []
        for value, (column, converters) in zip(values, self.converters, strict=True):
            for converter in converters:
                value = converter(value, column, connection)
            converted.append(value)
        if not self.plain:
            return self.model.from_db(self.alias, self.names, converted)
        instance = self.model.__new__(self.model)
        state = instance._state = ModelState()
        state.adding, state.db = False, self.alias
        instance.__dict__.update(zip(self.names, converted, strict=True))
        return instance


# The column attributes whose __set__, if any, on an instance just made only stores the
# value in its __dict__ (ForeignKeyDeferredAttribute forgets a cached related object first:
# a new instance has none).
_PLAIN_ATTRIBUTES = (DeferredAttribute, ForeignKeyDeferredAttribute)


def update_where(model: type, values: Mapping[str, Any], where: Mapping[str, Any]) -> int:
    """UPDATE model's rows whose where fields equal where's values, setting values' fields;
    return how many rows changed.

    QuerySet.filter(**where).update(**values) without its compile on each call (a third
    of a millisecond of CPU, more than the statement's own cost): the statement is
    written once per model, set fields and condition fields, and each value prepared by
    its field as save() and update() prepare it (inbox.bulk.row_update, an ended
    execution's record). Values only: an SQL expression is refused.
    """
    sql, params = update_where_statement(model, values, where)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def update_where_statement(model: type, values: Mapping[str, Any],
                           where: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """update_where's statement and its parameters, for a caller that sends it inside a
    statement of its own (inbox.bulk.row_update_inserting)."""
    meta = model._meta
    params = [meta.get_field(name).get_db_prep_save(value, connection)
              for name, value in values.items()]
    if any(hasattr(value, "as_sql") for value in params):
        raise ValueError("update_where writes values, not expressions.")
    params += [meta.get_field(name).get_db_prep_value(value, connection)
               for name, value in where.items()]
    return _update_sql(model, connection.vendor, tuple(values), tuple(where)), params


@functools.cache
def _update_sql(model: type, vendor: str, fields: tuple[str, ...],
                where: tuple[str, ...]) -> str:
    """update_where's statement for model, these set fields and these condition fields."""
    meta, quote = model._meta, connection.ops.quote_name
    sets = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in fields)
    tests = " AND ".join(f"{quote(meta.get_field(name).column)} = %s" for name in where)
    # Only the model's own names are formatted in; every value is a parameter.
    return f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {tests}"  # noqa: S608
