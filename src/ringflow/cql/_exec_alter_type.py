"""``ALTER TYPE``: the new definition of a user type, or Cassandra's error; the field and column
rules of user types. Pure.

Rules (Cassandra ``cql3/statements/schema/AlterTypeStatement.java``, ``CreateTypeStatement``,
``CreateTableStatement``, re-expressed):

* A field may be a non-frozen collection (``CREATE TYPE t (l list<int>)``), kept as declared in
  ``system_schema.types``; used as ``frozen<t>`` it is frozen with the value (``UserType.
  frozen_form``). A non-frozen UDT field is refused: "A user type cannot contain non-frozen
  UDTs". A non-frozen ``t`` column (its fields are cells) of a type holding a non-frozen
  collection is refused: "Non-frozen UDTs with nested non-frozen collections are not supported".
* ``ADD f type`` appends a field (existing values read it as null); refused if the name exists
  (unless ``IF NOT EXISTS``), if the field's type uses the type itself (circular), or if a table
  has the type in its partition key (values written before and after would hash differently);
  clustering keys and regular columns are fine; a field is checked as in ``CREATE TYPE``, and a
  non-frozen collection field is refused while a non-frozen column uses the type (ringflow's
  rule: Cassandra 4 lets it through, which would nest cells in cells);
* ``RENAME f TO g [AND ...]``: each old name must exist (unless ``IF EXISTS``), the new names
  must not collide; fields keep their positions, so stored cells (keyed by position) stay;
* ``ALTER f TYPE t`` is refused ("Altering field types is no longer supported");
* a missing type is "Type ks.t doesn't exist" (nothing happens with ``ALTER TYPE IF EXISTS``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ringflow.cql._ast import AlterTypeStatement, quote_name, resolve_type
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    CqlType,
    Keyspace,
    ListType,
    MapType,
    SetType,
    Table,
    TupleType,
    UserType,
)

NESTED_MULTICELL = "Non-frozen UDTs with nested non-frozen collections are not supported"


def check_field_type(field_type: CqlType) -> None:
    """A user type's field (module rules): a non-frozen UDT is refused."""
    if isinstance(field_type, UserType) and field_type.is_multicell:
        raise InvalidRequest("A user type cannot contain non-frozen UDTs")


def check_column_type(column_type: CqlType) -> None:
    """A column's type (module rules): a non-frozen UDT may not hold a non-frozen collection."""
    if _nests_multicell(column_type):
        raise InvalidRequest(NESTED_MULTICELL)


def _nests_multicell(column_type: CqlType) -> bool:
    return (
        isinstance(column_type, UserType)
        and column_type.is_multicell
        and any(field.is_multicell for field in column_type.field_types)
    )


def altered_user_type(
    statement: AlterTypeStatement, keyspace: Keyspace, tables: Iterable[Table]
) -> UserType | None:
    """The type's new definition, or None when nothing changes (the IF [NOT] EXISTS cases)."""
    name = statement.type_name.name
    current = keyspace.user_types.get(name)
    if current is None:
        if statement.if_exists:
            return None
        raise InvalidRequest(f"Type {keyspace.name}.{name} doesn't exist")
    if statement.altered_field is not None:
        raise InvalidRequest("Altering field types is no longer supported")
    if statement.add is not None:
        return _add_field(statement, keyspace, current, tables)
    return _rename_fields(statement, keyspace, current)


def _cql_name(user_type: UserType) -> str:
    return f"{quote_name(user_type.keyspace)}.{quote_name(user_type.name)}"


def _add_field(
    statement: AlterTypeStatement, keyspace: Keyspace, current: UserType, tables: Iterable[Table]
) -> UserType | None:
    added = statement.add
    assert added is not None
    if added.name in current.field_names:
        if statement.if_field:
            return None
        raise InvalidRequest(
            f"Cannot add field {added.name} to type {_cql_name(current)}: a field with name "
            f"{added.name} already exists"
        )
    spelled = added.type.cql()
    field_type = resolve_type(added.type, keyspace.user_types, keyspace.name)
    if _uses(field_type, current):
        raise InvalidRequest(
            f"Cannot add new field {added.name} of type {spelled} to user type "
            f"{_cql_name(current)} as it would create a circular reference"
        )
    check_field_type(field_type)
    if field_type.is_multicell and any(
        isinstance(c.type, UserType)
        and c.type.is_multicell
        and (c.type.keyspace, c.type.name) == (current.keyspace, current.name)
        for t in tables
        for c in t.columns
    ):
        raise InvalidRequest(NESTED_MULTICELL)
    keyed = [
        f"{quote_name(t.keyspace)}.{quote_name(t.name)}"
        for t in tables
        if any(_uses(c.type, current) for c in t.partition_key_columns)
    ]
    if keyed:
        raise InvalidRequest(
            f"Cannot add new field {added.name} of type {spelled} to user type "
            f"{_cql_name(current)} as the type is being used in partition key by the following "
            f"tables: {', '.join(keyed)}"
        )
    return UserType(
        current.keyspace,
        current.name,
        (*current.field_names, added.name),
        (*current.field_types, field_type),
    )


def _rename_fields(
    statement: AlterTypeStatement, keyspace: Keyspace, current: UserType
) -> UserType | None:
    names = list(current.field_names)
    for old, new in statement.renames:
        if old not in current.field_names:
            if statement.if_field:
                continue
            raise InvalidRequest(f"Unkown field {old} in user type {_cql_name(current)}")
        names[current.field_names.index(old)] = new
    for name in names:
        if names.count(name) > 1:
            # Cassandra's format string names the keyspace where it means the type.
            raise InvalidRequest(f"Duplicate field name {name} in type {keyspace.name}")
    if tuple(names) == current.field_names:
        return None
    return UserType(current.keyspace, current.name, tuple(names), current.field_types)


def _uses(cql_type: CqlType, user_type: UserType) -> bool:
    if isinstance(cql_type, UserType):
        if (cql_type.keyspace, cql_type.name) == (user_type.keyspace, user_type.name):
            return True
        return any(_uses(t, user_type) for t in cql_type.field_types)
    if isinstance(cql_type, ListType | SetType):
        return _uses(cql_type.element, user_type)
    if isinstance(cql_type, MapType):
        return _uses(cql_type.key, user_type) or _uses(cql_type.value, user_type)
    if isinstance(cql_type, TupleType):
        return any(_uses(t, user_type) for t in cql_type.elements)
    return False
