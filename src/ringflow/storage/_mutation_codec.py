"""A compact, versioned byte encoding of :class:`~ringflow.schema.Mutation`.

Used for hints (stored by the store) and, later, internode messages, so the decoder treats its
input as untrusted: every field is checked for shape, type and int64 range, and anything else
raises :class:`MutationDecodeError`; nothing else escapes. The encoding needs no schema.

Layout, version 1: one version byte ``0x01`` followed by a msgpack array::

    mutation  = [keyspace:str, table:str, [pk:bin...], deletion|nil, row|nil (static), [row...],
                 [range_tombstone...]]
    deletion  = [marked_for_delete_at_us:int, local_deletion_time_s:int]
    row       = [[clustering:bin...], liveness|nil, deletion|nil, [[column:str, data]...]]
    liveness  = [timestamp_us:int, ttl_s:int, local_expiration_time_s:int]
    data      = [0, cell] (simple) | [1, deletion|nil, [cell...]] (complex column)
    cell      = [timestamp_us:int, value:bin, ttl_s:int, local_deletion_time_s:int, path:bin|nil]
    range_tombstone = [[start:bin...], start_inclusive:bool, [end:bin...], end_inclusive:bool,
                       deletion]

A sequence of mutations (a hint, a message) is version byte ``0x01`` plus an array of the
encoded mutation arrays. A new layout gets a new version byte; decoders refuse unknown versions.

One row alone (:func:`encode_row`, the value of a packed-row atom in the store) is ``0x01`` plus
the ``row`` array above, except a *uniform* row, which is ``0x02`` plus::

    uniform_row = [[clustering:bin...], timestamp_us:int, ttl_s:int, local_deletion_time_s:int,
                   {column:str: value:bin, ...}]

A uniform row has no marker and no deletion, and its cells (at least one) are all simple cells
without path sharing one timestamp, TTL and local deletion time: every CDC delta row is one. The
choice is canonical (a row has exactly one encoding), so re-writing a row gives the same bytes.
:func:`decode_row` reads both; :func:`decode_mutation` only ``0x01``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from ringflow.schema import (
    Cell,
    ClusteringBound,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
)
from ringflow.storage._errors import InvalidMutation, MutationDecodeError

FORMAT_VERSION = 1
_VERSION_BYTE = bytes([FORMAT_VERSION])
UNIFORM_ROW_VERSION = 2
_UNIFORM_ROW_BYTE = bytes([UNIFORM_ROW_VERSION])
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_SIMPLE, _COMPLEX = 0, 1

# --- encoding -------------------------------------------------------------------------------


def _deletion_out(deletion: DeletionTime | None) -> list[int] | None:
    if deletion is None:
        return None
    return [deletion.marked_for_delete_at_us, deletion.local_deletion_time_s]


def _cell_out(cell: Cell) -> list[Any]:
    return [cell.timestamp_us, cell.value, cell.ttl_s, cell.local_deletion_time_s, cell.path]


def _data_out(data: ColumnData) -> list[Any]:
    if isinstance(data, Cell):
        return [_SIMPLE, _cell_out(data)]
    return [_COMPLEX, _deletion_out(data.deletion), [_cell_out(cell) for cell in data.cells]]


def _row_out(row: Row) -> list[Any]:
    liveness = row.liveness
    return [
        list(row.clustering),
        None
        if liveness is None
        else [liveness.timestamp_us, liveness.ttl_s, liveness.local_expiration_time_s],
        _deletion_out(row.deletion),
        [
            [name, [_SIMPLE, [data.timestamp_us, data.value, data.ttl_s,
                              data.local_deletion_time_s, data.path]]]
            if type(data) is Cell
            else [name, _data_out(data)]
            for name, data in row.cells.items()
        ],  # the simple cell of _data_out inline: the hot case of packed rows
    ]  # fmt: skip


def _mutation_out(mutation: Mutation) -> list[Any]:
    return [
        mutation.keyspace,
        mutation.table,
        list(mutation.partition_key),
        _deletion_out(mutation.partition_deletion),
        None if mutation.static_row is None else _row_out(mutation.static_row),
        [_row_out(row) for row in mutation.rows],
        [
            [
                list(rt.start.prefix),
                rt.start.inclusive,
                list(rt.end.prefix),
                rt.end.inclusive,
                _deletion_out(rt.deletion),
            ]
            for rt in mutation.range_tombstones
        ],
    ]


def _pack(obj: object) -> bytes:
    try:
        packed: bytes = msgpack.packb(obj, use_bin_type=True)
    except (OverflowError, TypeError, ValueError) as error:
        raise InvalidMutation(f"mutation cannot be encoded: {error}") from None
    return _VERSION_BYTE + packed


def encode_mutation(mutation: Mutation) -> bytes:
    """The version-1 bytes of ``mutation``; :func:`decode_mutation` returns an equal Mutation."""
    return _pack(_mutation_out(mutation))


def _uniform_cell(row: Row) -> Cell | None:
    """The first cell of ``row`` if the row is uniform (module docstring), else None."""
    if row.liveness is not None or row.deletion is not None or not row.cells:
        return None
    first: Cell | None = None
    for data in row.cells.values():
        if type(data) is not Cell or data.path is not None:
            return None
        if first is None:
            first = data
        elif (data.timestamp_us, data.ttl_s, data.local_deletion_time_s) != (
            first.timestamp_us,
            first.ttl_s,
            first.local_deletion_time_s,
        ):
            return None
    return first


def encode_row(row: Row) -> bytes:
    """One row (see the module docstring: ``0x02`` and the uniform layout for a uniform row,
    else ``0x01`` and the ``row`` array): the value of a packed-row atom in the store."""
    first = _uniform_cell(row)
    if first is None:
        return _pack(_row_out(row))
    values = {name: data.value for name, data in row.cells.items()}  # type: ignore[union-attr]
    return encode_uniform_row(
        row.clustering, values, first.timestamp_us, first.ttl_s, first.local_deletion_time_s
    )


_packers = threading.local()


def _packer() -> msgpack.Packer:
    """This thread's reusable packer (building one per call costs as much as packing a row)."""
    packer: msgpack.Packer | None = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer


def encode_uniform_row(
    clustering: Sequence[bytes],
    values: Mapping[str, bytes],
    timestamp_us: int,
    ttl_s: int,
    local_deletion_time_s: int,
) -> bytes:
    """:func:`encode_row` of the row of ``clustering`` with no marker or deletion whose cells,
    in ``values`` order (at least one), are simple cells sharing ``timestamp_us``, ``ttl_s`` and
    ``local_deletion_time_s``: the same bytes, without building the row (a CDC delta row).
    ``values`` must be a non-empty ``dict`` (InvalidMutation otherwise) of column names to
    ``bytes``; the caller vouches for the types inside (:func:`decode_row` checks them)."""
    if type(values) is not dict or not values:
        raise InvalidMutation("a uniform row needs a non-empty dict of values")
    try:
        packed: bytes = _packer().pack(
            (tuple(clustering), timestamp_us, ttl_s, local_deletion_time_s, values)
        )
    except (OverflowError, TypeError, ValueError) as error:
        _packers.packer = None  # a failed pack may leave the buffer dirty: start afresh
        raise InvalidMutation(f"row cannot be encoded: {error}") from None
    return _UNIFORM_ROW_BYTE + packed


def encode_mutations(mutations: Sequence[Mutation]) -> bytes:
    """Several mutations in one buffer (a hint, a message)."""
    return _pack([_mutation_out(mutation) for mutation in mutations])


# --- decoding -------------------------------------------------------------------------------


def _fail(what: str, value: object) -> MutationDecodeError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MutationDecodeError(f"mutation encoding: bad {what}: {shown}")


def _int(value: object, what: str) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise _fail(what + " (want int64)", value)
    return value


def _bytes(value: object, what: str) -> bytes:
    if type(value) is not bytes:
        raise _fail(what + " (want bytes)", value)
    return value


def _str(value: object, what: str) -> str:
    if type(value) is not str:
        raise _fail(what + " (want str)", value)
    return value


def _array(value: object, length: int | None, what: str) -> list[Any]:
    if type(value) is not list or (length is not None and len(value) != length):
        want = "array" if length is None else f"array of {length}"
        raise _fail(f"{what} (want {want})", value)
    return value


def _deletion_in(value: object, what: str) -> DeletionTime | None:
    if value is None:
        return None
    fields = _array(value, 2, what)
    return DeletionTime(_int(fields[0], what), _int(fields[1], what))


def _cell_in(value: object) -> Cell:
    fields = _array(value, 5, "cell")
    path = fields[4]
    return Cell(
        _int(fields[0], "cell timestamp"),
        _bytes(fields[1], "cell value"),
        _int(fields[2], "cell ttl"),
        _int(fields[3], "cell local deletion time"),
        None if path is None else _bytes(path, "cell path"),
    )


def _data_in(value: object) -> ColumnData:
    fields = _array(value, None, "column data")
    tag = fields[0] if fields and type(fields[0]) is int else None
    if len(fields) == 2 and tag == _SIMPLE:
        return _cell_in(fields[1])
    if len(fields) == 3 and tag == _COMPLEX:
        cells = tuple(_cell_in(cell) for cell in _array(fields[2], None, "complex cells"))
        return ComplexColumn(cells, _deletion_in(fields[1], "collection deletion"))
    raise _fail("column data tag", fields[:1])


def _row_in(value: object) -> Row:
    fields = _array(value, 4, "row")
    clustering = tuple(_bytes(v, "clustering value") for v in _array(fields[0], None, "ck"))
    liveness = None
    if fields[1] is not None:
        parts = _array(fields[1], 3, "row liveness")
        liveness = LivenessInfo(
            _int(parts[0], "liveness"), _int(parts[1], "liveness"), _int(parts[2], "liveness")
        )
    cells: dict[str, ColumnData] = {}
    for entry in _array(fields[3], None, "row cells"):
        name, data = _array(entry, 2, "row cell")
        name = _str(name, "column name")
        if name in cells:
            raise _fail("duplicate column", name)
        cells[name] = _data_in(data)
    return Row(clustering, liveness, _deletion_in(fields[2], "row deletion"), cells)


def _bound_in(prefix: object, inclusive: object) -> ClusteringBound:
    if type(inclusive) is not bool:
        raise _fail("bound inclusive flag", inclusive)
    values = tuple(_bytes(v, "bound value") for v in _array(prefix, None, "bound prefix"))
    return ClusteringBound(values, inclusive)


def _range_tombstone_in(value: object) -> RangeTombstone:
    fields = _array(value, 5, "range tombstone")
    deletion = _deletion_in(fields[4], "range tombstone deletion")
    if deletion is None:
        raise _fail("range tombstone deletion", None)
    return RangeTombstone(
        _bound_in(fields[0], fields[1]), _bound_in(fields[2], fields[3]), deletion
    )


def _mutation_in(value: object) -> Mutation:
    fields = _array(value, 7, "mutation")
    key = tuple(_bytes(v, "partition key") for v in _array(fields[2], None, "partition key"))
    return Mutation(
        _str(fields[0], "keyspace"),
        _str(fields[1], "table"),
        key,
        _deletion_in(fields[3], "partition deletion"),
        None if fields[4] is None else _row_in(fields[4]),
        tuple(_row_in(row) for row in _array(fields[5], None, "rows")),
        tuple(_range_tombstone_in(rt) for rt in _array(fields[6], None, "range tombstones")),
    )


def _unpack(data: bytes, versions: tuple[int, ...] = (FORMAT_VERSION,)) -> tuple[int, object]:
    """The version byte of ``data`` (one of ``versions``) and the msgpack value after it."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise _fail("input type", type(data).__name__)
    raw = bytes(data)
    if not raw:
        raise MutationDecodeError("mutation encoding: empty input")
    if raw[0] not in versions:
        raise MutationDecodeError(
            f"mutation encoding: unknown version {raw[0]} (this node reads {FORMAT_VERSION})"
        )
    try:
        return raw[0], msgpack.unpackb(raw[1:], raw=False, use_list=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise MutationDecodeError(f"mutation encoding: not valid msgpack: {error}") from None


UniformRow = tuple[tuple[bytes, ...], int, int, int, dict[str, bytes]]
"""A uniform row's fields: clustering, timestamp, TTL, local deletion time and its cells'
values by column name (every cell shares the three numbers)."""


def _uniform_fields(value: object) -> UniformRow:
    fields = _array(value, 5, "uniform row")
    clustering = tuple(_bytes(v, "clustering value") for v in _array(fields[0], None, "ck"))
    ts = _int(fields[1], "cell timestamp")
    ttl = _int(fields[2], "cell ttl")
    ldt = _int(fields[3], "cell local deletion time")
    values = fields[4]
    if type(values) is not dict or not values:
        raise _fail("uniform row cells (want a non-empty map)", values)
    for name, data in values.items():
        if type(name) is not str:
            raise _fail("column name (want str)", name)
        if type(data) is not bytes:
            raise _fail("cell value (want bytes)", data)
    return clustering, ts, ttl, ldt, values


def _uniform_row_in(value: object) -> Row:
    clustering, ts, ttl, ldt, values = _uniform_fields(value)
    cells: dict[str, ColumnData] = {
        name: Cell._unchecked(ts, data, ttl, ldt) for name, data in values.items()
    }
    return Row(clustering, None, None, cells)


def decode_mutation(data: bytes) -> Mutation:
    """The Mutation encoded in ``data``; MutationDecodeError on anything malformed."""
    return _mutation_in(_unpack(data)[1])


def decode_row(data: bytes) -> Row:
    """The Row of :func:`encode_row`; MutationDecodeError on anything malformed."""
    version, value = _unpack(data, (FORMAT_VERSION, UNIFORM_ROW_VERSION))
    return _uniform_row_in(value) if version == UNIFORM_ROW_VERSION else _row_in(value)


def decode_uniform_row(data: bytes) -> UniformRow | None:
    """The fields of a row :func:`encode_row` wrote in the uniform layout, without building
    its cells (a CDC log row read back); None for the general layout (use :func:`decode_row`).
    MutationDecodeError on anything malformed."""
    if data[:1] != _UNIFORM_ROW_BYTE:
        return None
    return _uniform_fields(_unpack(data, (UNIFORM_ROW_VERSION,))[1])


def decode_mutations(data: bytes) -> list[Mutation]:
    """The mutations of :func:`encode_mutations`; MutationDecodeError on anything malformed."""
    items = _array(_unpack(data)[1], None, "mutation list")
    return [_mutation_in(item) for item in items]
