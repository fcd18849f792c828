"""A packed table's uniform rows (every CDC log row) are read without building their cells, and
that shortcut answers exactly what the general path (assemble the row, then ``live_values``)
answers: the same live values, writetimes and TTLs, the same rows absent, the same tombstones
counted, whatever the mix of uniform rows, general packed rows, several stored versions of one
row, per-cell atoms, expiry and partition tombstones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import InternalError
from ringflow.schema import (
    NO_DELETION_TIME,
    Cell,
    ColumnData,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    Row,
)
from ringflow.storage._catalog import TableInfo
from ringflow.storage._mutation_codec import decode_uniform_row, encode_row
from ringflow.storage._read import (
    AtomTuple,
    PartitionTombstones,
    TombstoneBudget,
    assemble_rows,
    live_rows,
    stored_live_rows,
)
from ringflow.storage._sqlite_layout import KIND_PACKED_ROW, KIND_PARTITION_DELETION
from ringflow.storage._write import flatten_mutation
from tests.unit.storage._tables import EVENTS, i32, txt

PACKED = TableInfo.of(1, EVENTS, packed_rows=True)
PER_CELL = TableInfo.of(1, EVENTS)
NOW_S = 1_000


def _cell(timestamp_us: int, value: bytes, ttl_s: int, deletion_s: int) -> Cell:
    return Cell(timestamp_us, value, ttl_s, deletion_s)


@st.composite
def _expiry(draw: st.DrawFn) -> tuple[int, int]:
    """(ttl, local deletion time): live forever, expiring (before or after NOW_S), tombstone."""
    kind = draw(st.sampled_from(["live", "expiring", "tombstone"]))
    if kind == "live":
        return 0, NO_DELETION_TIME
    deletion_s = draw(st.integers(NOW_S - 2, NOW_S + 2))
    return (draw(st.integers(1, 100)), deletion_s) if kind == "expiring" else (0, deletion_s)


@st.composite
def _row(draw: st.DrawFn, clustering: tuple[bytes, bytes]) -> Row:
    """Half the rows uniform (cells sharing timestamp and expiry, nothing else); the others
    mix cell expiries, a collection, a row marker or a row deletion."""
    names = draw(st.lists(st.sampled_from(["v", "n"]), min_size=1, max_size=2, unique=True))
    timestamp_us = draw(st.integers(1, 5))
    ttl_s, deletion_s = draw(_expiry())
    if draw(st.booleans()):
        uniform = {name: _cell(timestamp_us, txt(name), ttl_s, deletion_s) for name in names}
        return Row(clustering, None, None, dict[str, ColumnData](uniform))
    cells: dict[str, ColumnData] = {}
    for name in names:
        cell_ttl, cell_deletion = draw(_expiry())
        cells[name] = _cell(draw(st.integers(1, 5)), txt(name), cell_ttl, cell_deletion)
    if draw(st.booleans()):
        cells["tags"] = ComplexColumn((Cell.live(timestamp_us, b"", txt("t")),))
    liveness = LivenessInfo(timestamp_us) if draw(st.booleans()) else None
    deletion = DeletionTime(2, NOW_S) if draw(st.integers(0, 3)) == 0 else None
    return Row(clustering, liveness, deletion, cells)


@st.composite
def _partition_atoms(draw: st.DrawFn) -> list[AtomTuple]:
    """A partition's atoms as the store reads them: ordered by ``ck``, several stored versions
    (packed, or per cell as an unpacked table wrote them) of some rows."""
    atoms: list[AtomTuple] = []
    for position in range(draw(st.integers(1, 6))):
        clustering = (i32(position), txt("x"))
        for _version in range(draw(st.sampled_from([1, 1, 2, 3]))):
            row = draw(_row(clustering))
            info = PACKED if draw(st.integers(0, 4)) else PER_CELL
            flat = flatten_mutation(info, Mutation("ks", "events", (i32(7),), rows=(row,)))
            atoms.extend(atom[1:] for atom in flat.atoms)
    atoms.sort(key=lambda atom: (atom[2], atom[3], atom[4], atom[5]))
    return atoms


def _general(
    atoms: list[AtomTuple], tombstones: PartitionTombstones, now_s: int
) -> tuple[list[object], int]:
    budget = TombstoneBudget(10**9)
    rows = list(
        stored_live_rows(PACKED, assemble_rows(PACKED, atoms, budget, now_s), tombstones, now_s)
    )
    return rows, budget.seen


def _shortcut(
    atoms: list[AtomTuple], tombstones: PartitionTombstones, now_s: int
) -> tuple[list[object], int]:
    budget = TombstoneBudget(10**9)
    rows = list(live_rows(PACKED, atoms, tombstones, budget, now_s))
    return rows, budget.seen


@settings(max_examples=300, deadline=None)
@given(_partition_atoms(), st.integers(NOW_S - 3, NOW_S + 3), st.booleans())
def test_live_rows_equal_the_assembled_rows_live_values(
    atoms: list[AtomTuple], now_s: int, deleted: bool
) -> None:
    token, pk = atoms[0][0], atoms[0][1]
    partition = [(token, pk, KIND_PARTITION_DELETION, b"", b"", 3, NOW_S, b"")] if deleted else []
    tombstones = PartitionTombstones.of(partition)
    assert _shortcut(atoms, tombstones, now_s) == _general(atoms, tombstones, now_s)


def test_uniform_rows_take_the_shortcut_and_keep_ttl_and_writetime() -> None:
    clustering = (i32(1), txt("x"))
    row = Row(clustering, None, None, {"v": _cell(9, txt("a"), 60, NOW_S + 60),
                                       "n": _cell(9, i32(4), 60, NOW_S + 60)})  # fmt: skip
    flat = flatten_mutation(PACKED, Mutation("ks", "events", (i32(7),), rows=(row,)))
    (atom,) = [atom[1:] for atom in flat.atoms]
    assert decode_uniform_row(atom[9]) == (clustering, 9, 60, NOW_S + 60,
                                          {"v": txt("a"), "n": i32(4)})  # fmt: skip
    ((ck, got_clustering, live),) = live_rows(
        PACKED, [atom], PartitionTombstones.of([]), None, NOW_S
    )
    assert got_clustering == clustering
    assert live is not None
    assert live.values == {"v": txt("a"), "n": i32(4)}
    assert live.writetime_us == {"v": 9, "n": 9}
    assert live.ttl_s == {"v": 60, "n": 60}
    budget = TombstoneBudget(2)
    expired = list(live_rows(PACKED, [atom], PartitionTombstones.of([]), budget, NOW_S + 60))
    assert expired == [(ck, clustering, None)]
    assert budget.seen == 2  # both expired cells count, as in the per-cell form


def test_a_general_row_is_not_read_as_uniform() -> None:
    row = Row((i32(1), txt("x")), LivenessInfo(3), None, {"v": Cell.live(3, txt("a"))})
    assert decode_uniform_row(encode_row(row)) is None


@pytest.mark.parametrize("value", [b"\x02\x91", b"\x02" + b"\x95\x90\x01\x00\xff\x80"])
def test_a_corrupt_uniform_row_fails_the_read_as_internal_error(value: bytes) -> None:
    atom = (0, b"pk", b"ck", KIND_PACKED_ROW, "", b"d", 0, 0, NO_DELETION_TIME, value)
    with pytest.raises(InternalError, match="corrupt packed row"):
        list(live_rows(PACKED, [atom], PartitionTombstones.of([]), None, NOW_S))
