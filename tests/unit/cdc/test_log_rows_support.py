"""Shared tools of the CDC log-row tests (no tests here): schemas, statements, decoded rows.

Base mutations are built the way Scylla's CQL layer builds them for the statement quoted next to
each helper (``docs/features/cdc/cdc-advanced-types.rst``: ``SET c = {...}`` and ``INSERT``
write the collection tombstone at T−1; a column ``DELETE`` at T). Log rows are decoded with the
schema codec into short-keyed dicts so expectations read like the docs' ``SELECT`` output:
``op`` = ``cdc$operation``, ``ttl`` = ``cdc$ttl``, ``eob`` = ``cdc$end_of_batch``,
``del_X`` = ``cdc$deleted_X``, ``delel_X`` = ``cdc$deleted_elements_X``, ``ts`` = the µs in
``cdc$time``, ``seq`` = ``cdc$batch_seq_no``; null columns are absent.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringflow.cdc._log_rows import CdcCapture, build_log_mutations
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.schema import (
    INT,
    NO_DELETION_TIME,
    TEXT,
    CdcOptions,
    Cell,
    ClusteringBound,
    ClusteringOrder,
    ColumnData,
    ComplexColumn,
    CqlType,
    DeletionTime,
    DeltaMode,
    ListType,
    LivenessInfo,
    MapType,
    Mutation,
    PreimageMode,
    RangeTombstone,
    Row,
    SetType,
    Table,
    TableOptions,
    UserType,
    timeuuid_from_micros,
    timeuuid_to_micros,
)
from ringflow.schema._codec import deserialize, serialize

T = 1_606_390_225_588_947  # the write timestamp of the docs' examples (µs)
NOW_S = 1_606_390_225
STREAM = bytes(range(16))
CAPTURE = CdcCapture(STREAM, 0x1234_5678_9ABC_DEF0)
UT = UserType("ks", "ut", ("a", "b", "c"), (INT, INT, INT))

_SHORT_META = {
    "cdc$operation": "op",
    "cdc$ttl": "ttl",
    "cdc$end_of_batch": "eob",
}


def cdc(
    preimage: PreimageMode = PreimageMode.OFF,
    postimage: bool = False,
    delta: DeltaMode = DeltaMode.FULL,
    ttl_s: int = 86400,
) -> TableOptions:
    return TableOptions(cdc=CdcOptions(True, preimage, postimage, delta, ttl_s))


def table(
    name: str,
    clustering: Sequence[str] = ("ck",),
    static: Sequence[tuple[str, CqlType]] = (),
    regular: Sequence[tuple[str, CqlType]] = (("v1", INT), ("v2", INT)),
    options: TableOptions | None = None,
) -> Table:
    """``ks.<name> (pk int, <clustering> int ..., PRIMARY KEY (pk, <clustering>))``."""
    return Table.create(
        "ks",
        name,
        [("pk", INT)],
        [(ck, INT, ClusteringOrder.ASC) for ck in clustering],
        static,
        regular,
        options or cdc(),
    )


def collections_table(options: TableOptions | None = None) -> Table:
    """``(pk, ck, m map<int,text>, st set<int>, l list<int>, u ut, fm frozen<map<int,int>>)``."""
    regular: list[tuple[str, CqlType]] = [
        ("m", MapType(INT, TEXT)),
        ("st", SetType(INT)),
        ("l", ListType(INT)),
        ("u", UT),
        ("fm", MapType(INT, INT, frozen=True)),
    ]
    return table("c", regular=regular, options=options)


def i(value: int) -> bytes:
    return serialize(INT, value)


def txt(value: str) -> bytes:
    return serialize(TEXT, value)


def field_path(index: int) -> bytes:
    return index.to_bytes(2, "big")


def list_key(n: int) -> bytes:
    """A list cell path: a timeuuid as Scylla mints them for ``l = l + [...]``."""
    return timeuuid_from_micros(T - 1000 + n, 0x0123_4567_89AB_CDEF).bytes


def list_uuid(n: int) -> uuid.UUID:
    return uuid.UUID(bytes=list_key(n))


# --- statements -------------------------------------------------------------------------------


def live(value: bytes, ts: int = T, ttl_s: int = 0, path: bytes | None = None) -> Cell:
    if ttl_s:
        return Cell.expiring(ts, ttl_s, NOW_S, value, path)
    return Cell.live(ts, value, path)


def dead(ts: int = T, path: bytes | None = None) -> Cell:
    return Cell.tombstone(ts, NOW_S, path)


def tombstone(ts: int) -> DeletionTime:
    return DeletionTime(ts, NOW_S)


def overwrite(cells: Sequence[Cell], ts: int = T) -> ComplexColumn:
    """``SET c = {...}``: a collection tombstone at T−1 and the new cells at T."""
    return ComplexColumn(tuple(cells), tombstone(ts - 1))


def elements(*cells: Cell, deletion: DeletionTime | None = None) -> ComplexColumn:
    """A non-frozen column's cells (``c = c + ...``, ``c = c - ...``, ``c[k] = ...``)."""
    return ComplexColumn(tuple(cells), deletion)


def map_cells(values: Mapping[int, int]) -> ComplexColumn:
    """``m = m + {k: v, ...}`` on a ``map<int, int>``."""
    return elements(*(live(i(value), path=i(key)) for key, value in values.items()))


def marker(ts: int = T, ttl_s: int = 0) -> LivenessInfo:
    if ttl_s:
        return LivenessInfo(ts, ttl_s, NOW_S + ttl_s)
    return LivenessInfo(ts, 0, NO_DELETION_TIME)


def row(
    ck: Sequence[int] | None = (0,),
    cells: Mapping[str, ColumnData] | None = None,
    liveness: LivenessInfo | None = None,
    deletion: DeletionTime | None = None,
) -> Row:
    clustering = () if ck is None else tuple(i(value) for value in ck)
    return Row(clustering, liveness, deletion, cells or {})


def bound(values: Sequence[int] = (), inclusive: bool = True) -> ClusteringBound:
    return ClusteringBound(tuple(i(value) for value in values), inclusive)


def range_delete(start: ClusteringBound, end: ClusteringBound, ts: int = T) -> RangeTombstone:
    return RangeTombstone(start, end, tombstone(ts))


def mutation(
    base: Table,
    rows: Sequence[Row] = (),
    static: Mapping[str, ColumnData] | None = None,
    ranges: Sequence[RangeTombstone] = (),
    partition_deletion: DeletionTime | None = None,
    pk: int = 0,
) -> Mutation:
    static_row = None if static is None else Row((), None, None, static)
    return Mutation(
        base.keyspace,
        base.name,
        (i(pk),),
        partition_deletion,
        static_row,
        tuple(rows),
        tuple(ranges),
    )


# --- decoding the log -----------------------------------------------------------------------


def short_name(name: str) -> str:
    if name in _SHORT_META:
        return _SHORT_META[name]
    if name.startswith("cdc$deleted_elements_"):
        return "delel_" + name.removeprefix("cdc$deleted_elements_")
    if name.startswith("cdc$deleted_"):
        return "del_" + name.removeprefix("cdc$deleted_")
    return name


@dataclass(frozen=True)
class Built:
    """The decoded output of one :func:`build` call, with the raw mutations kept."""

    mutations: list[Mutation]
    rows: list[dict[str, Any]] = field(default_factory=list)


def decode(log: Table, mutations: Sequence[Mutation]) -> list[dict[str, Any]]:
    """Every log row as a short-keyed dict (``ts``, ``seq`` and the non-null columns)."""
    decoded = []
    for log_mutation in mutations:
        for log_row in log_mutation.rows:
            time, seq = log_row.clustering
            values: dict[str, Any] = {
                "ts": timeuuid_to_micros(uuid.UUID(bytes=time)),
                "seq": deserialize(INT, seq),
            }
            for name, cell in log_row.cells.items():
                assert isinstance(cell, Cell)
                values[short_name(name)] = deserialize(log.column(name).type, cell.value)
            decoded.append(values)
    return decoded


def build(
    base: Table,
    base_mutation: Mutation,
    preimage: Mapping[tuple[bytes, ...], Mapping[str, bytes]] | None = None,
    postimage: Mapping[tuple[bytes, ...], Mapping[str, bytes]] | None = None,
) -> Built:
    log = cdc_log_table(base)
    mutations = build_log_mutations(
        base, log, base_mutation, CAPTURE, NOW_S, preimage=preimage, postimage=postimage
    )
    return Built(mutations, decode(log, mutations))


def expect(*rows: Mapping[str, Any], ts: int = T, pk: int = 0) -> list[dict[str, Any]]:
    """One bucket's rows: ``ts``/``seq``/``pk`` filled in, ``eob`` on the last row."""
    expected = []
    for seq, values in enumerate(rows):
        full = {"ts": ts, "seq": seq, "pk": pk, **values}
        if seq == len(rows) - 1:
            full["eob"] = True
        expected.append(full)
    return expected
