"""The schema version digest: a content hash every node computes alike for the same schema.

cassandra-core.md §9 "Version": MD5 over the rows of the schema tables, excluding local system
keyspaces, turned into a UUID with ``UUID.nameUUIDFromBytes`` (MD5 once more, version-3 bits).
The construction is Cassandra's, so the empty schema gives Cassandra's
``59adb24e-f3cd-3e02-97f0-5b395827453f``; the rows are ringflow's own canonical serialization (a
non-empty schema's digest is not Cassandra's). One row per keyspace, user type, table, column and
dropped column; every row is a sequence of length-prefixed UTF-8 fields, rows sorted by their
names, maps by key, so neither dict order nor creation order matters. Table options are read
field by field from :class:`TableOptions`, so a new option joins the digest without edits here.

The chain version (the last migration's TimeUUID, seed 004) is a different notion:
``SchemaState.version``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping

from ringflow.schema._migrations import SchemaState
from ringflow.schema._table import CdcOptions, Keyspace, Table, TableOptions
from ringflow.schema._types import UserType

LOCAL_SYSTEM_KEYSPACES = frozenset({"system", "system_schema"})
"""Keyspaces each node holds for itself; like Cassandra, they stay out of the digest."""

EMPTY_SCHEMA_DIGEST = uuid.UUID("59adb24e-f3cd-3e02-97f0-5b395827453f")
"""Cassandra's ``SchemaConstants.emptyVersion``: the digest of a schema with no rows."""


def name_uuid_from_bytes(data: bytes) -> uuid.UUID:
    """Java's ``UUID.nameUUIDFromBytes``: MD5 of ``data`` with version 3 and the IETF variant."""
    return uuid.UUID(bytes=hashlib.md5(data).digest(), version=3)


def schema_digest(state: SchemaState) -> uuid.UUID:
    """The content version of ``state``: ``nameUUIDFromBytes(MD5(rows))``."""
    hasher = hashlib.md5()
    for row in schema_rows(state):
        hasher.update(row)
    return name_uuid_from_bytes(hasher.digest())


def schema_rows(state: SchemaState) -> Iterator[bytes]:
    """The canonical serialized rows of ``state``, in digest order."""
    for name in sorted(state.keyspaces):
        if name in LOCAL_SYSTEM_KEYSPACES:
            continue
        keyspace = state.keyspaces[name]
        yield _keyspace_row(keyspace)
        for type_name in sorted(keyspace.user_types):
            yield _type_row(name, type_name, keyspace.user_types[type_name])
        for table in state.tables_of(name):
            yield from _table_rows(state, table)


def _row(kind: str, *fields: str) -> bytes:
    encoded = [field.encode("utf-8") for field in (kind, *fields)]
    return b"".join(len(field).to_bytes(4, "big") + field for field in encoded)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _keyspace_row(keyspace: Keyspace) -> bytes:
    replication: Mapping[str, str] = {str(k): str(v) for k, v in keyspace.replication.items()}
    return _row(
        "keyspaces", keyspace.name, _json(keyspace.durable_writes), _json(dict(replication))
    )


def _type_row(keyspace: str, name: str, user_type: UserType) -> bytes:
    field_types = [field_type.cql_name() for field_type in user_type.field_types]
    return _row("types", keyspace, name, _json(list(user_type.field_names)), _json(field_types))


def _table_rows(state: SchemaState, table: Table) -> Iterator[bytes]:
    yield _row("tables", table.keyspace, table.name, str(table.id), _options_field(table.options))
    for column in sorted(table.columns, key=lambda c: c.name):
        yield _row(
            "columns",
            table.keyspace,
            table.name,
            column.name,
            column.kind.value,
            str(column.position),
            column.order.value,
            column.type.cql_name(),
        )
    for dropped in state.dropped_columns_of(table.keyspace, table.name):
        yield _row(
            "dropped_columns",
            table.keyspace,
            table.name,
            dropped.name,
            dropped.type.cql_name(),
            str(dropped.dropped_at_us),
        )


def _options_field(options: TableOptions) -> str:
    values: dict[str, object] = {}
    for option in dataclasses.fields(options):
        value = getattr(options, option.name)
        values[option.name] = value.to_map() if isinstance(value, CdcOptions) else value
    return _json(values)
