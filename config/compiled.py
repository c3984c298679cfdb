"""Reads the ORM builds and compiles once per shape; each call binds its own values.

Building a queryset with a few subqueries and compiling it costs the ORM milliseconds,
where running the statement costs a tenth of that (access_task: 2.0 ms against 0.16 ms).
A hot read whose shape (its joins, its conditions) depends only on a few flags is built
once per shape with stand-in values, compiled, and run again with each call's values put
where the stand-ins were. The rows become instances as the ORM's own iterable makes them
(select_related objects and annotations included), through the compiler kept from that
first compile.

Each bound value is declared with the field it is compared to, so it is prepared exactly
as the ORM prepares it (a UUID stays a UUID on PostgreSQL, becomes hex text on SQLite; a
malformed one raises ValidationError, as the ORM's filter does). A list of values (an
``__in`` filter) is declared Many(field): each length is a shape of its own, as the SQL
has one parameter per value.
"""

import copy
import dataclasses
import threading
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Field, QuerySet
from django.db.models.query import get_related_populators
from django.db.transaction import TransactionManagementError


@dataclass(frozen=True)
class Many:
    """A list of values compared to field (``__in``); one shape per length of the list."""

    field: Field


@dataclass(frozen=True)
class _Shape:
    """One shape compiled: its SQL, where each value goes, and how rows become instances."""

    sql: str | None  # None: the shape matches nothing (EmptyResultSet).
    for_update: bool  # SELECT ... FOR UPDATE: only in a transaction, as the ORM holds it
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str, int | None], ...]  # (position, name, index in a Many)
    compiler: Any
    init_list: tuple[str, ...]
    start: int
    end: int
    populators: tuple[Any, ...]
    annotations: tuple[tuple[str, int], ...]
    # The converters of each column that has any, by connection (a thread's own: the
    # backend's converters are its operations' methods), as the ORM's iterable finds
    # them on every run (compiler.get_converters: a few per cent of a request's CPU).
    converters: "weakref.WeakKeyDictionary[Any, tuple[Any, ...]]" = dataclasses.field(
        default_factory=weakref.WeakKeyDictionary, compare=False)


class CompiledRead:
    """A read of model instances, compiled once per (shape key, database) and run again.

    build(key, **values) returns the queryset for one shape; it must use each value only
    where it is compared to the field declared for it (a filter, a subquery's filter), so
    that it reaches the SQL as one parameter. A value used otherwise (turned into SQL
    text, or never used) fails the first compile loudly instead of binding wrongly.
    """

    def __init__(self, build: Callable[..., QuerySet], **fields: Field | Many) -> None:
        self.build = build
        self.many = {name for name, field in fields.items() if isinstance(field, Many)}
        self.fields = {name: field.field if isinstance(field, Many) else field
                       for name, field in fields.items()}
        self._shapes: dict[tuple[Hashable, ...], _Shape] = {}
        self._lock = threading.Lock()  # One compile per shape, whichever thread is first.

    def run(self, key: Hashable, *, using: str = "default", **values: Any) -> list[Any]:
        """Return the instances the shape key reads with these values."""
        shape, params = self._bound(key, using, values)
        if shape.sql is None:
            return []
        connection = connections[using]
        if (shape.for_update and connection.features.has_select_for_update
                and connection.get_autocommit() and connection.features.supports_transactions):
            # The ORM's own check, which only the first compile would otherwise make.
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction.")
        with connection.cursor() as cursor:
            cursor.execute(shape.sql, params)
            rows = cursor.fetchall()
        converters = shape.converters.get(connection)
        if converters is None:
            converters = shape.converters[connection] = _converters(shape.compiler,
                                                                    connection)
        if converters:
            rows = list(_converted(rows, converters, connection))
        model = shape.compiler.klass_info["model"]
        found = []
        for row in rows:
            obj = model.from_db(using, shape.init_list, row[shape.start:shape.end])
            for populator in shape.populators:
                populator.populate(row, obj)
            for name, position in shape.annotations:
                setattr(obj, name, row[position])
            found.append(obj)
        return found

    def statement(self, key: Hashable, *, using: str = "default",
                  **values: Any) -> tuple[str | None, list[Any]]:
        """Return the SQL and parameters run() sends for these values (None: no statement)."""
        shape, params = self._bound(key, using, values)
        return shape.sql, params

    def _bound(self, key: Hashable, using: str, values: dict[str, Any]
               ) -> tuple[_Shape, list[Any]]:
        """Return the shape of key (compiled on its first call) and its parameters, each
        value prepared by its declared field and put where its stand-in was."""
        if values.keys() != self.fields.keys():
            raise TypeError(f"CompiledRead.run takes {sorted(self.fields)}, "
                            f"not {sorted(values)}")
        connection = connections[using]
        values = {name: list(value) if name in self.many else value
                  for name, value in values.items()}
        lengths = tuple(len(values[name]) for name in sorted(self.many))
        cached = (key, connection.vendor, lengths)
        shape = self._shapes.get(cached)
        if shape is None:
            with self._lock:
                shape = self._shapes.get(cached) or self._compile(key, using, values)
                self._shapes[cached] = shape
        params = list(shape.params)
        for position, name, index in shape.slots:
            value = values[name] if index is None else values[name][index]
            params[position] = self.fields[name].get_db_prep_value(value, connection)
        return shape, params

    def _compile(self, key: Hashable, using: str, values: dict[str, Any]) -> _Shape:
        # Stand-ins no real value equals: one per value (per item of a Many), each of the
        # type its field prepares, each in one slot: (name, index in a Many or None).
        stand_ins: dict[tuple[str, int | None], Any] = {}
        for name, field in self.fields.items():
            indexes = range(len(values[name])) if name in self.many else [None]
            for index in indexes:
                stand_ins[(name, index)] = _stand_in(field, len(stand_ins))
        arguments: dict[str, Any] = {}
        for (name, index), stand_in in stand_ins.items():
            if index is None:
                arguments[name] = stand_in
            else:
                arguments.setdefault(name, []).append(stand_in)
        for name in self.many:
            arguments.setdefault(name, [])
        queryset = self.build(key, **arguments).using(using)
        if queryset._known_related_objects or queryset._prefetch_related_lookups:
            raise ValueError("CompiledRead runs one statement: no prefetch, no known objects.")
        compiler = queryset.query.get_compiler(using=using)
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:
            return _Shape(None, False, (), (), None, (), 0, 0, (), ())
        connection = connections[using]
        marks = {slot: self.fields[slot[0]].get_db_prep_value(stand_in, connection)
                 for slot, stand_in in stand_ins.items()}
        slots = tuple((position, name, index) for position, param in enumerate(params)
                      for (name, index), mark in marks.items()
                      if type(param) is type(mark) and param == mark)
        unbound = {name for name, _ in marks} - {name for _, name, _ in slots}
        if unbound:
            raise ValueError(f"CompiledRead shape {key!r}: {sorted(unbound)} never reach the "
                             "SQL as parameters; compare each to its declared field.")
        klass_info, select = compiler.klass_info, compiler.select
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        return _Shape(
            sql=sql, for_update=queryset.query.select_for_update, params=tuple(params),
            slots=slots, compiler=compiler,
            init_list=tuple(column[0].target.attname for column in select[start:end]),
            start=start, end=end,
            populators=tuple(get_related_populators(klass_info, select, using)),
            annotations=tuple(compiler.annotation_col_map.items()))


def _converters(compiler: Any, connection: Any) -> tuple[Any, ...]:
    """The (position, converters, expression) of each selected column that has converters,
    as compiler.results_iter finds them, for connection."""
    compiler = copy.copy(compiler)
    compiler.connection = connection  # The backend's converters of this connection.
    found = compiler.get_converters([column[0] for column in
                                     compiler.select[0:compiler.col_count]])
    return tuple((position, tuple(converters), expression)
                 for position, (converters, expression) in found.items())


def _converted(rows: list[tuple[Any, ...]], converters: tuple[Any, ...],
               connection: Any) -> Iterator[list[Any]]:
    """The rows with each converter applied, as compiler.apply_converters applies them."""
    for row in map(list, rows):
        for position, functions, expression in converters:
            value = row[position]
            for function in functions:
                value = function(value, expression, connection)
            row[position] = value
        yield row


def _stand_in(field: Field, index: int) -> Any:
    """Return a value of the field's type that no real row or caller uses."""
    while field.is_relation:  # A foreign key's values are its target's.
        field = field.target_field
    kind = field.get_internal_type()
    if kind == "UUIDField":
        return uuid.UUID(int=(0x5EED << 112) | (0xC0_FFEE << 32) | index)
    if kind in ("AutoField", "BigAutoField", "IntegerField", "BigIntegerField",
                "SmallIntegerField", "PositiveIntegerField"):
        return -(2**62) + 7_919 * index + 104_729
    if kind in ("CharField", "TextField", "SlugField", "EmailField"):
        return f"\x1fcompiled-read-stand-in-{index}\x1f"
    raise ValueError(f"CompiledRead has no stand-in for a {kind}.")


class Earliest:
    """The earliest value of a column in each of a few reads, in one statement compiled once.

    build() returns (queryset, column) pairs. Each becomes a scalar subquery, the
    queryset's rows with the column set, ordered by it, the first one: read from the end
    of an index on the column, as MIN(column) is, and NULLs left out as MIN leaves them.
    The statement is ``SELECT (first), (second), ...``: one round trip where a MIN each
    was one round trip and an aggregate built and compiled each (the ORM's aggregate
    costs about ten times its statement's own client time). The values come back as the
    ORM converts them (a datetime aware on SQLite too).

    For reads whose values do not change between calls (their filters are constants):
    the first call per database compiles, every call after it only runs.
    """

    def __init__(self, build: Callable[[], list[tuple[QuerySet, str]]]) -> None:
        self.build = build
        self._compiled: dict[str, tuple[str, tuple[Any, ...], tuple[Any, ...]]] = {}
        self._lock = threading.Lock()  # One compile per database, whichever thread is first.

    def run(self, *, using: str = "default") -> list[Any]:
        """Return each read's earliest value, in build()'s order (None where none is set)."""
        connection = connections[using]
        sql, params, columns = self._get(using)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        values = []
        for value, (expression, converters) in zip(row, columns, strict=True):
            if value is not None:
                for converter in converters:
                    value = converter(value, expression, connection)
            values.append(value)
        return values

    def statement(self, *, using: str = "default") -> tuple[str, tuple[Any, ...]]:
        """Return the SQL and parameters run() sends."""
        sql, params, _ = self._get(using)
        return sql, params

    def _get(self, using: str) -> tuple[str, tuple[Any, ...], tuple[Any, ...]]:
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(using) or self._compile(using)
                self._compiled[using] = compiled
        return compiled

    def _compile(self, using: str) -> tuple[str, tuple[Any, ...], tuple[Any, ...]]:
        connection = connections[using]
        parts, params, columns = [], [], []
        for queryset, column in self.build():
            first = (queryset.using(using).filter(**{f"{column}__isnull": False})
                     .order_by(column).values_list(column, flat=True)[:1])
            compiler = first.query.get_compiler(using=using)
            sql, values = compiler.as_sql()
            parts.append(f"({sql})")
            params.extend(values)
            expression = compiler.select[0][0]
            # The converters the ORM's own iterable would apply to this column.
            [(converters, _)] = compiler.get_converters([expression]).values() or [((), None)]
            columns.append((expression, tuple(converters)))
        sql = "SELECT " + ", ".join(parts) + connection.features.bare_select_suffix
        return sql, tuple(params), tuple(columns)
