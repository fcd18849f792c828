"""A mutation, validated against its table and flattened into SQLite rows. Pure.

``flatten_mutation`` is the only way data reaches the store's tables: it checks the mutation
against the table (key arity, clustering arity, each column's existence, kind and shape, int64
ranges, TTL >= 0) and returns the ``atoms`` and ``partition_atoms`` rows of the layout module.
Any failure raises :class:`InvalidMutation` naming the table, the column and the rule, so a batch
can be validated completely before its transaction begins.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from operator import itemgetter

import msgpack

from ringflow.cdc import DeltaRow
from ringflow.errors import invariant
from ringflow.ring import RingError, partition_key_bytes
from ringflow.schema import (
    NO_DELETION_TIME,
    NO_TIMESTAMP,
    Cell,
    Column,
    ComplexColumn,
    DeletionTime,
    Mutation,
    Row,
    restrict_columns,
    token_of_key_bytes,
)
from ringflow.storage._catalog import TableInfo
from ringflow.storage._errors import InvalidMutation
from ringflow.storage._keys import STATIC_CK, end_key, row_key, start_key
from ringflow.storage._limits import ATOM_OVERHEAD_BYTES
from ringflow.storage._mutation_codec import encode_row, encode_uniform_row
from ringflow.storage._sqlite_layout import (
    KIND_CELL,
    KIND_CLUSTERING,
    KIND_COLLECTION_DELETION,
    KIND_LIVENESS,
    KIND_PACKED_ROW,
    KIND_PARTITION_DELETION,
    KIND_RANGE_TOMBSTONE,
    KIND_ROW_DELETION,
)

AtomRow = tuple[int, int, bytes, bytes, int, str, bytes, int, int, int, bytes]
"""(tid, token, pk, ck, kind, col, path, ts, ttl, ldt, value): one ``atoms`` row."""
LogAppendRow = tuple[int, int, bytes, bytes, bytes, bytes]
"""(tid, token, pk, ck, digest, value): a packed atom queued in ``log_queue`` (the layout's
constant kind, col, ts, ttl and ldt left out)."""
PartitionAtomRow = tuple[int, int, bytes, int, bytes, bytes, int, int, bytes]
"""(tid, token, pk, kind, low, high, ts, ldt, bounds): one ``partition_atoms`` row."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FlatMutation:
    """One mutation's rows for the layout's tables, and the partition it writes."""

    token: int
    partition_key: bytes
    atoms: list[AtomRow]
    partition_atoms: list[PartitionAtomRow]
    size_bytes: int
    """Estimated serialized size: keys, values, paths, column names, bounds, 16 B per atom."""
    cells: int
    """Cells, markers and tombstones written (packed rows count their cells)."""


def partition_position(info: TableInfo, partition_key: tuple[bytes, ...]) -> tuple[int, bytes]:
    """``(token, key bytes)`` of a partition key, validated (arity, bytes, non-empty, length)."""
    if len(partition_key) != info.partition_key_arity:
        raise InvalidMutation(
            f"table {info.qualified_name}: partition key has {len(partition_key)} components, "
            f"the table has {info.partition_key_arity}"
        )
    if any(type(part) is not bytes for part in partition_key):
        raise InvalidMutation(f"table {info.qualified_name}: partition key values must be bytes")
    try:
        key = partition_key_bytes(partition_key)
        if not key:
            raise InvalidMutation(f"table {info.qualified_name}: key may not be empty")
        return token_of_key_bytes(info.table.name, key), key
    except RingError as error:
        raise InvalidMutation(f"table {info.qualified_name}: {error}") from None


def _check_int64(info: TableInfo, what: str, *values: int) -> None:
    for value in values:
        if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidMutation(f"table {info.qualified_name}: {what} {value!r} is not an int64")


def _cell_is_valid(cell: Cell, element: bool) -> bool:
    """One expression for the hot path; :func:`_cell_problem` explains a failure."""
    ts, ttl, ldt = cell.timestamp_us, cell.ttl_s, cell.local_deletion_time_s
    return (
        type(ts) is int
        and type(ttl) is int
        and type(ldt) is int
        and type(cell.value) is bytes
        and _INT64_MIN <= ts <= _INT64_MAX
        and 0 <= ttl <= _INT64_MAX
        and _INT64_MIN <= ldt <= _INT64_MAX
        and (type(cell.path) is bytes if element else cell.path is None)
    )


def _cell_problem(info: TableInfo, name: str, cell: Cell, element: bool) -> InvalidMutation:
    where = f"table {info.qualified_name}: column {name!r}"
    if element and type(cell.path) is not bytes:
        return InvalidMutation(f"{where}: a collection element needs a bytes path")
    if not element and cell.path is not None:
        return InvalidMutation(f"{where}: a simple column's cell has no path")
    if type(cell.value) is not bytes:
        return InvalidMutation(f"{where}: value is not bytes")
    return InvalidMutation(
        f"{where}: timestamp {cell.timestamp_us!r}, ttl {cell.ttl_s!r} and local deletion time "
        f"{cell.local_deletion_time_s!r} must be int64 (ttl >= 0)"
    )


def _deletion_values(info: TableInfo, what: str, deletion: DeletionTime) -> tuple[int, int]:
    ts, ldt = deletion.marked_for_delete_at_us, deletion.local_deletion_time_s
    _check_int64(info, what, ts, ldt)
    return ts, ldt


def _row_atoms(
    info: TableInfo,
    head: tuple[int, int, bytes, bytes],
    row: Row,
    columns: Mapping[str, Column],
    out: list[AtomRow],
) -> None:
    """Append the atoms of ``row`` (stored under ``head`` = tid, token, pk, ck) to ``out``."""
    tid, token, pk, ck = head
    if row.liveness is not None:
        live = row.liveness
        _check_int64(
            info, "row liveness", live.timestamp_us, live.local_expiration_time_s, live.ttl_s
        )
        out.append(
            (tid, token, pk, ck, KIND_LIVENESS, "", b"", live.timestamp_us, live.ttl_s,
             live.local_expiration_time_s, b"")
        )  # fmt: skip
    if row.deletion is not None:
        ts, ldt = _deletion_values(info, "row deletion", row.deletion)
        out.append((tid, token, pk, ck, KIND_ROW_DELETION, "", b"", ts, 0, ldt, b""))
    multicell = info.multicell
    for name, data in row.cells.items():
        if name not in columns:
            kind = "static" if columns is info.static_columns else "regular"
            raise InvalidMutation(f"table {info.qualified_name}: no {kind} column {name!r}")
        if isinstance(data, Cell):
            if name in multicell:
                raise InvalidMutation(
                    f"table {info.qualified_name}: column {name!r} is a non-frozen collection, "
                    "got a simple cell"
                )
            if not _cell_is_valid(data, False):
                raise _cell_problem(info, name, data, False)
            out.append(
                (tid, token, pk, ck, KIND_CELL, name, b"", data.timestamp_us, data.ttl_s,
                 data.local_deletion_time_s, data.value)
            )  # fmt: skip
            continue
        if not isinstance(data, ComplexColumn) or name not in multicell:
            raise InvalidMutation(
                f"table {info.qualified_name}: column {name!r} is not a non-frozen collection"
            )
        _complex_atoms(info, head, name, data, out)


def _complex_atoms(
    info: TableInfo,
    head: tuple[int, int, bytes, bytes],
    name: str,
    data: ComplexColumn,
    out: list[AtomRow],
) -> None:
    tid, token, pk, ck = head
    if data.deletion is not None:
        ts, ldt = _deletion_values(info, f"collection {name!r} deletion", data.deletion)
        out.append((tid, token, pk, ck, KIND_COLLECTION_DELETION, name, b"", ts, 0, ldt, b""))
    for cell in data.cells:
        if not _cell_is_valid(cell, True):
            raise _cell_problem(info, name, cell, True)
        out.append(
            (tid, token, pk, ck, KIND_CELL, name, cell.path or b"", cell.timestamp_us,
             cell.ttl_s, cell.local_deletion_time_s, cell.value)
        )  # fmt: skip


def _clustering_key(info: TableInfo, row: Row) -> bytes:
    clustering = row.clustering
    if len(clustering) != info.clustering_arity:
        raise InvalidMutation(
            f"table {info.qualified_name}: row clustering has {len(clustering)} values, "
            f"the table has {info.clustering_arity} clustering columns"
        )
    if any(type(value) is not bytes for value in clustering):
        raise InvalidMutation(f"table {info.qualified_name}: clustering values must be bytes")
    return row_key(info.encode_clustering, clustering)


def _static_row_atoms(
    info: TableInfo, head: tuple[int, int, bytes], row: Row, out: list[AtomRow]
) -> None:
    if row.clustering or row.liveness is not None or row.deletion is not None:
        raise InvalidMutation(
            f"table {info.qualified_name}: a static row has no clustering, liveness or deletion"
        )
    if not info.static_columns:
        raise InvalidMutation(f"table {info.qualified_name}: the table has no static columns")
    _row_atoms(info, (*head, STATIC_CK), row, info.static_columns, out)


def _partition_atoms(
    info: TableInfo, head: tuple[int, int, bytes], mutation: Mutation
) -> list[PartitionAtomRow]:
    tid, token, pk = head
    rows: list[PartitionAtomRow] = []
    if mutation.partition_deletion is not None:
        ts, ldt = _deletion_values(info, "partition deletion", mutation.partition_deletion)
        rows.append((tid, token, pk, KIND_PARTITION_DELETION, b"", b"", ts, ldt, b""))
    for tombstone in mutation.range_tombstones:
        start, end = tombstone.start, tombstone.end
        for bound in (start, end):
            if len(bound.prefix) > info.clustering_arity or any(
                type(value) is not bytes for value in bound.prefix
            ):
                raise InvalidMutation(
                    f"table {info.qualified_name}: bad range tombstone bound {bound!r}"
                )
        ts, ldt = _deletion_values(info, "range tombstone", tombstone.deletion)
        bounds: bytes = msgpack.packb(
            [list(start.prefix), start.inclusive, list(end.prefix), end.inclusive],
            use_bin_type=True,
        )
        low, high = start_key(info.encode_clustering, start), end_key(info.encode_clustering, end)
        rows.append((tid, token, pk, KIND_RANGE_TOMBSTONE, low, high, ts, ldt, bounds))
    return rows


def _packed_atom(head: tuple[int, int, bytes, bytes], row: Row) -> AtomRow:
    """A whole row as one atom, keyed by a digest of its bytes (see the layout module)."""
    value = encode_row(row)
    digest = blake2b(value, digest_size=8).digest()
    return (*head, KIND_PACKED_ROW, "", digest, NO_TIMESTAMP, 0, NO_DELETION_TIME, value)


def _flatten_packed(info: TableInfo, mutation: Mutation) -> FlatMutation:
    """:func:`flatten_mutation` for a table with packed rows: one atom per row, its cells
    checked (and counted) exactly like a per-cell table's."""
    token, pk = partition_position(info, mutation.partition_key)
    tid = info.tid
    atoms: list[AtomRow] = []
    checked: list[AtomRow] = []  # the per-cell atoms, for their checks and count only
    if mutation.static_row is not None:
        _static_row_atoms(info, (tid, token, pk), mutation.static_row, checked)
        atoms.append(_packed_atom((tid, token, pk, STATIC_CK), mutation.static_row))
    for row in mutation.rows:
        ck = _clustering_key(info, row)
        _row_atoms(info, (tid, token, pk, ck), row, info.regular_columns, checked)
        atoms.append(_packed_atom((tid, token, pk, ck), row))
    partition_atoms = _partition_atoms(info, (tid, token, pk), mutation)
    size_bytes = _size_bytes(mutation, pk, atoms, partition_atoms)
    cells = len(checked) + len(partition_atoms)
    return FlatMutation(token, pk, atoms, partition_atoms, size_bytes, cells)


def _cell_count(row: Row) -> int:
    """The cells, marker and deletions of ``row``, counted like :func:`_row_atoms` does."""
    count = (row.liveness is not None) + (row.deletion is not None)
    for data in row.cells.values():
        if isinstance(data, Cell):
            count += 1
        else:
            count += (data.deletion is not None) + len(data.cells)
    return count


def flatten_built_log(info: TableInfo, mutation: Mutation) -> FlatMutation:
    """:func:`flatten_mutation` of a mutation of a packed-row table that the store built itself
    (its CDC log rows, ``build_log_mutations``), which are valid by construction: the same rows,
    size and count, without the per-cell checks and the generic key walk. Anything outside the
    builder's usual shape (static row, partition-level tombstones, an unusual key) takes
    :func:`flatten_mutation`, which also reports anything invalid."""
    trusted_row_key = info.trusted_row_key
    key = mutation.partition_key
    if (
        not info.packed_rows
        or trusted_row_key is None
        or mutation.static_row is not None
        or mutation.partition_deletion is not None
        or mutation.range_tombstones
        or len(key) != 1
        or info.partition_key_arity != 1
    ):
        return flatten_mutation(info, mutation)
    pk = key[0]
    if type(pk) is not bytes or not pk:
        return flatten_mutation(info, mutation)
    try:
        token = token_of_key_bytes(info.table.name, pk)
        tid = info.tid
        atoms: list[AtomRow] = []
        cells = 0
        arity = info.clustering_arity
        for row in mutation.rows:
            clustering = row.clustering
            if len(clustering) != arity:
                return flatten_mutation(info, mutation)
            value = encode_row(row)
            digest = blake2b(value, digest_size=8).digest()
            atoms.append(
                (tid, token, pk, trusted_row_key(clustering), KIND_PACKED_ROW, "", digest,
                 NO_TIMESTAMP, 0, NO_DELETION_TIME, value)
            )  # fmt: skip
            cells += _cell_count(row)
    except Exception:  # not the builder's output after all: the checked path
        return flatten_mutation(info, mutation)
    return FlatMutation(token, pk, atoms, [], _size_bytes(mutation, pk, atoms, []), cells)


def delta_row_append(info: TableInfo, delta: DeltaRow) -> LogAppendRow | None:
    """The queue row of the one atom :func:`flatten_built_log` gives for the log mutation of
    ``delta`` (``cdc._log_rows.DeltaRowBuilder``; the log table ``info`` is packed), built
    straight from it: no ``Mutation``, ``Row`` or ``Cell`` objects, no checks. None for anything
    unusual (the caller then builds and flattens the mutation, which reports what is wrong)."""
    trusted_row_key, token_of_key = info.trusted_row_key, info.token_of_key
    pk = delta.stream_id
    if (
        trusted_row_key is None
        or token_of_key is None
        or not info.packed_rows
        or info.clustering_arity != 2
        or info.partition_key_arity != 1
        or type(pk) is not bytes
        or not pk
    ):
        return None
    try:
        token = token_of_key(pk)
        ck = trusted_row_key(delta.clustering)
        value = encode_uniform_row(
            delta.clustering,
            delta.values,
            delta.timestamp_us,
            delta.ttl_s,
            delta.local_deletion_time_s,
        )
    except Exception:  # not the builder's usual output: the checked path
        return None
    return (info.tid, token, pk, ck, blake2b(value, digest_size=8).digest(), value)


def delta_row_atom(info: TableInfo, delta: DeltaRow) -> AtomRow | None:
    """The atom of :func:`delta_row_append` (what settling its queue row writes)."""
    queued = delta_row_append(info, delta)
    return None if queued is None else queued_atom(queued)


def queued_atom(queued: LogAppendRow) -> AtomRow:
    """The ``atoms`` row a ``log_queue`` row settles into."""
    tid, token, pk, ck, digest, value = queued
    return (tid, token, pk, ck, KIND_PACKED_ROW, "", digest, NO_TIMESTAMP, 0,
            NO_DELETION_TIME, value)  # fmt: skip


def queue_row(atom: AtomRow) -> LogAppendRow:
    """The ``log_queue`` row of a packed atom (inverse of :func:`queued_atom`)."""
    invariant(
        atom[4] == KIND_PACKED_ROW and atom[5] == "" and atom[7:10] == _PACKED_CONSTANTS,
        f"not a packed atom: {atom[:8]!r}",
    )
    return (atom[0], atom[1], atom[2], atom[3], atom[6], atom[10])


_PACKED_CONSTANTS = (NO_TIMESTAMP, 0, NO_DELETION_TIME)


def without_dropped_columns(info: TableInfo, mutation: Mutation) -> Mutation:
    """``mutation`` without its cells of columns the table has dropped (and not added again);
    the same object when it has none. As Cassandra's deserializer, which maps a dropped column's
    cells to the dropped column and never shows them, a replica takes such a mutation instead of
    refusing it: it comes from a peer the DROP has not reached yet, or it is a read repair
    reconciled from a replica that still had the column when it answered. Refused, a repair
    leaves its read waiting for the ack until it times out. A column the table never had is
    still refused (:func:`flatten_mutation`)."""
    dropped = info.dropped_names
    if not dropped:
        return mutation
    names = {name for row in _value_rows(mutation) for name in row.cells}
    if dropped.isdisjoint(names):
        return mutation
    return restrict_columns(mutation, names - dropped)


def _value_rows(mutation: Mutation) -> Iterator[Row]:
    if mutation.static_row is not None:
        yield mutation.static_row
    yield from mutation.rows


def flatten_mutation(info: TableInfo, mutation: Mutation) -> FlatMutation:
    """Validate ``mutation`` against ``info`` and return its rows; InvalidMutation if bad."""
    if info.packed_rows:
        return _flatten_packed(info, mutation)
    token, pk = partition_position(info, mutation.partition_key)
    head = (info.tid, token, pk)
    tid = info.tid
    atoms: list[AtomRow] = []
    if mutation.static_row is not None:
        _static_row_atoms(info, head, mutation.static_row, atoms)
    regular = info.regular_columns
    for row in mutation.rows:
        ck = _clustering_key(info, row)
        if info.clustering_arity:
            clustering = msgpack.packb(row.clustering, use_bin_type=True)
            atoms.append(
                (tid, token, pk, ck, KIND_CLUSTERING, "", b"", NO_TIMESTAMP, 0,
                 NO_DELETION_TIME, clustering)
            )  # fmt: skip
        _row_atoms(info, (tid, token, pk, ck), row, regular, atoms)
    partition_atoms = _partition_atoms(info, head, mutation)
    size_bytes = _size_bytes(mutation, pk, atoms, partition_atoms)
    cells = len(atoms) + len(partition_atoms)
    if info.clustering_arity:
        cells -= len(mutation.rows)  # the clustering atoms
    return FlatMutation(token, pk, atoms, partition_atoms, size_bytes, cells)


_VALUE, _PATH, _COLUMN, _BOUNDS = itemgetter(10), itemgetter(6), itemgetter(5), itemgetter(8)


def _size_bytes(
    mutation: Mutation, pk: bytes, atoms: list[AtomRow], partition_atoms: list[PartitionAtomRow]
) -> int:
    """The limit's size estimate, summed at C speed over the atoms (one count per atom)."""
    payload = sum(map(len, map(_VALUE, atoms))) + sum(map(len, map(_PATH, atoms)))
    payload += sum(map(len, map(_COLUMN, atoms))) + sum(map(len, map(_BOUNDS, partition_atoms)))
    overhead = ATOM_OVERHEAD_BYTES * (len(atoms) + len(partition_atoms))
    return len(mutation.keyspace) + len(mutation.table) + len(pk) + payload + overhead
