"""Packed tables (the CDC logs) are validated and sized exactly like per-cell tables, and a batch's
queued writes are flushed before an image read only when they touch the partition read.

The packed flatten (its own function) must give the same error for a bad row, the same cell
count (for the batch limit) as a per-cell table, and the size estimate (for the mutation limit)
over the atoms it writes.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

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
from ringflow.storage._catalog import TableInfo
from ringflow.storage._errors import InvalidMutation
from ringflow.storage._mutation_codec import encode_row
from ringflow.storage._sqlite_layout import KIND_PACKED_ROW
from ringflow.storage._write import FlatMutation, _size_bytes, flatten_mutation
from ringflow.storage._write_buffer import WriteBuffer as _WriteBuffer
from tests.unit.storage._tables import EVENTS, i32, txt

PER_CELL, PACKED = TableInfo.of(1, EVENTS), TableInfo.of(1, EVENTS, packed_rows=True)
CK = (i32(1), txt("a"))
PLAIN: dict[str, ColumnData] = {
    "v": Cell.expiring(5, 60, 100, txt("x")),
    "n": Cell.tombstone(5, 100),
}
ELEMENTS = ComplexColumn((Cell.live(5, b"", txt("t")),), DeletionTime(4, 100))
DELETION = DeletionTime(3, 100)


def _mutation(*rows: Row, **parts: object) -> Mutation:
    return replace(Mutation("ks", "events", (i32(7),), rows=rows), **parts)  # type: ignore[arg-type]


_VALID = {
    "plain row": _mutation(Row(CK, None, None, PLAIN)),
    "two rows": _mutation(Row(CK, None, None, PLAIN), Row((i32(2), txt("b")), None, None, PLAIN)),
    "row marker": _mutation(Row(CK, LivenessInfo(5), None, PLAIN)),
    "row deletion": _mutation(Row(CK, None, DELETION, {})),
    "collection": _mutation(Row(CK, None, None, {"tags": ELEMENTS, **PLAIN})),
    "static row": _mutation(static_row=Row((), None, None, {"s": Cell.live(5, txt("s"))})),
    "tombstones": _mutation(
        Row(CK, None, None, PLAIN),
        partition_deletion=DELETION,
        range_tombstones=(RangeTombstone(ClusteringBound((i32(0),)), ClusteringBound(), DELETION),),
    ),
}
_INVALID: dict[str, dict[str, ColumnData]] = {
    "unknown column": {"nope": Cell.live(5, b"")},
    "static column in a clustered row": {"s": Cell.live(5, b"")},
    "simple cell of a collection": {"tags": Cell.live(5, b"")},
    "collection cells on a simple column": {"v": ELEMENTS},
    "timestamp beyond int64": {"v": Cell(2**63, b"")},
    "value not bytes": {"v": Cell(5, "text")},  # type: ignore[arg-type]
    "negative ttl": {"v": Cell(5, b"", -1, 100)},
    "path on a simple cell": {"v": Cell(5, b"", 0, 100, b"p")},
    "element without path": {"tags": ComplexColumn((Cell.live(5, b""),))},
}


@pytest.mark.parametrize("name", sorted(_VALID))
def test_packed_rows_count_and_size_like_the_atoms(name: str) -> None:
    mutation = _VALID[name]
    packed, per_cell = flatten_mutation(PACKED, mutation), flatten_mutation(PER_CELL, mutation)
    assert packed.cells == per_cell.cells
    assert (packed.token, packed.partition_key) == (per_cell.token, per_cell.partition_key)
    assert packed.partition_atoms == per_cell.partition_atoms
    rows = [*([] if mutation.static_row is None else [mutation.static_row]), *mutation.rows]
    assert [atom[4] for atom in packed.atoms] == [KIND_PACKED_ROW] * len(rows)
    for atom, row in zip(packed.atoms, rows, strict=True):
        assert atom[10] == encode_row(row)
        assert atom[6] == hashlib.blake2b(atom[10], digest_size=8).digest()
    atoms, partition_atoms = packed.atoms, packed.partition_atoms
    assert packed.size_bytes == _size_bytes(mutation, packed.partition_key, atoms, partition_atoms)


@pytest.mark.parametrize("name", sorted(_INVALID))
def test_bad_packed_rows_fail_like_per_cell_rows(name: str) -> None:
    for mutation in (
        _mutation(Row(CK, None, None, _INVALID[name])),
        _mutation(Row(CK, None, None, {**PLAIN, **_INVALID[name]})),
    ):
        with pytest.raises(InvalidMutation) as per_cell:
            flatten_mutation(PER_CELL, mutation)
        with pytest.raises(InvalidMutation) as packed:
            flatten_mutation(PACKED, mutation)
        assert str(packed.value) == str(per_cell.value)


@pytest.mark.parametrize("clustering", [(i32(1),), (i32(1), txt("a"), b""), (i32(1), "a")])
def test_bad_packed_clustering_fails_like_per_cell(clustering: tuple[bytes, ...]) -> None:
    mutation = _mutation(Row(clustering, None, None, PLAIN))
    with pytest.raises(InvalidMutation) as per_cell:
        flatten_mutation(PER_CELL, mutation)
    with pytest.raises(InvalidMutation) as packed:
        flatten_mutation(PACKED, mutation)
    assert str(packed.value) == str(per_cell.value)


class _Connection:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def executemany(self, _sql: str, rows: list[object]) -> None:
        self.calls.append(len(rows))


def _flat(tid: int, token: int, pk: bytes) -> FlatMutation:
    atom = (tid, token, pk, b"", 2, "", b"", 1, 0, 0, b"")
    return FlatMutation(token, pk, [atom], [], 0, 1)


def test_image_reads_flush_only_writes_to_their_partition() -> None:
    connection = _Connection()
    writes = _WriteBuffer(connection)  # type: ignore[arg-type]
    writes.add(_flat(1, 5, b"a"))
    writes.add(_flat(2, 5, b"b"))
    writes.add(FlatMutation(5, b"c", [], [], 0, 0))  # writes nothing
    for tid, token, pk in ((1, 5, b"b"), (2, 5, b"a"), (3, 5, b"a"), (1, 6, b"a"), (1, 5, b"c")):
        writes.flush_partition(tid, token, pk)
    assert connection.calls == []
    writes.flush_partition(2, 5, b"b")
    assert connection.calls == [2]
    writes.flush_partition(2, 5, b"b")
    assert connection.calls == [2]
