"""Model instances of rows read by hand, made as the ORM makes them.

For the few hot statements written in SQL (the take-next function's answer, an API token's
sign-in): each value goes through the converters the ORM would apply to its column (the
backend's, then the field's, e.g. JSON text to Python), then Model.from_db.
"""

from typing import Any


class ModelRows:
    """Makes one model's instances of its concrete columns, in the model's field order."""

    # Per model and database: the converters are the vendor's; the connection each one
    # is given is the caller's own (connections are per thread).
    _made: dict[tuple[type, str], "ModelRows"] = {}

    def __init__(self, model: type, connection: Any) -> None:
        self.model, self.alias = model, connection.alias
        fields = model._meta.concrete_fields
        self.names = [field.attname for field in fields]
        self.width = len(fields)
        self.converters = []
        for field in fields:
            column = field.get_col(model._meta.db_table)
            self.converters.append((column, [*connection.ops.get_db_converters(column),
                                             *field.get_db_converters(connection)]))

    @classmethod
    def of(cls, model: type, connection: Any) -> "ModelRows":
        key = (model, connection.alias)
        if key not in cls._made:
            cls._made[key] = cls(model, connection)
        return cls._made[key]

    def instance(self, values: tuple[Any, ...], connection: Any) -> Any:
        """Return the instance of one row's values (the model's columns, in order)."""
        converted = []
        for value, (column, converters) in zip(values, self.converters, strict=True):
            for converter in converters:
                value = converter(value, column, connection)
            converted.append(value)
        return self.model.from_db(self.alias, self.names, converted)
