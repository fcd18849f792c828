"""The SQL upsert of the layout module is Cassandra's reconcile, exactly.

Method: a fresh in-memory database with the store's schema; write two versions of one atom with
``UPSERT_ATOM`` (or ``UPSERT_PARTITION_ATOM``) in either order and compare what SQLite kept with
the schema layer's pure ``reconcile_cells`` / ``reconcile_liveness`` / ``merge_deletion``. Values,
timestamps and deletion times are drawn from small pools so that ties (the interesting cases)
are frequent; extreme values (int64 bounds, NO_DELETION_TIME) are included.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.schema import (
    EXPIRED_LIVENESS_TTL_S,
    NO_DELETION_TIME,
    Cell,
    DeletionTime,
    LivenessInfo,
    merge_deletion,
    reconcile_cells,
    reconcile_liveness,
)
from ringflow.storage._sqlite_layout import (
    KIND_CELL,
    KIND_LIVENESS,
    KIND_ROW_DELETION,
    SCHEMA,
    UPSERT_ATOM,
    UPSERT_PARTITION_ATOM,
)

SETTINGS = settings(max_examples=300, deadline=None)
timestamps = st.sampled_from([-(2**63), -1, 0, 1, 2, 2**63 - 1])
seconds = st.sampled_from([0, 1, 2, 100, 2**31 - 1, NO_DELETION_TIME - 1])
ttls = st.sampled_from([1, 2, 7])
values = st.sampled_from(
    [b"", b"\x00", b"\x00\x00", b"\x01", b"\x01\x00", b"\x7f", b"\x80", b"\xff"]
)


@st.composite
def cells(draw: st.DrawFn) -> Cell:
    timestamp_us = draw(timestamps)
    kind = draw(st.sampled_from(["live", "expiring", "tombstone"]))
    if kind == "live":
        return Cell.live(timestamp_us, draw(values))
    if kind == "tombstone":
        return Cell(timestamp_us, draw(values), 0, draw(seconds))
    return Cell(timestamp_us, draw(values), draw(ttls), draw(seconds))


@st.composite
def livenesses(draw: st.DrawFn) -> LivenessInfo:
    timestamp_us = draw(timestamps)
    kind = draw(st.sampled_from(["plain", "expiring", "expired"]))
    if kind == "plain":
        return LivenessInfo(timestamp_us)
    ttl_s = EXPIRED_LIVENESS_TTL_S if kind == "expired" else draw(ttls)
    return LivenessInfo(timestamp_us, ttl_s, draw(seconds))


deletions = st.builds(DeletionTime, timestamps, seconds)


@pytest.fixture(scope="module")
def connection() -> Iterator[sqlite3.Connection]:
    database = sqlite3.connect(":memory:", isolation_level=None)
    for statement in SCHEMA.split(";"):
        if statement.strip():
            database.execute(statement)
    yield database
    database.close()


def _upsert(
    connection: sqlite3.Connection, kind: int, ts: int, ttl: int, ldt: int, value: bytes
) -> None:
    connection.execute(UPSERT_ATOM, (1, 7, b"pk", b"\x01ck", kind, "c", b"", ts, ttl, ldt, value))


def _stored(connection: sqlite3.Connection, kind: int) -> tuple[int, int, int, bytes]:
    row = connection.execute(
        "SELECT ts, ttl, ldt, value FROM atoms WHERE kind = ?", (kind,)
    ).fetchone()
    connection.execute("DELETE FROM atoms")
    return row  # type: ignore[no-any-return]


@SETTINGS
@given(first=cells(), second=cells())
def test_cell_upsert_is_reconcile_cells(
    connection: sqlite3.Connection, first: Cell, second: Cell
) -> None:
    expected = reconcile_cells(first, second)
    assert expected == reconcile_cells(second, first) or first == second
    for order in ((first, second), (second, first)):
        for cell in order:
            _upsert(
                connection,
                KIND_CELL,
                cell.timestamp_us,
                cell.ttl_s,
                cell.local_deletion_time_s,
                cell.value,
            )
        ts, ttl, ldt, value = _stored(connection, KIND_CELL)
        assert Cell(ts, value, ttl, ldt) == expected


@SETTINGS
@given(first=livenesses(), second=livenesses())
def test_liveness_upsert_is_reconcile_liveness(
    connection: sqlite3.Connection, first: LivenessInfo, second: LivenessInfo
) -> None:
    expected = reconcile_liveness(first, second)
    for order in ((first, second), (second, first)):
        for live in order:
            _upsert(
                connection,
                KIND_LIVENESS,
                live.timestamp_us,
                live.ttl_s,
                live.local_expiration_time_s,
                b"",
            )
        ts, ttl, ldt, _ = _stored(connection, KIND_LIVENESS)
        assert LivenessInfo(ts, ttl, ldt) == expected


@SETTINGS
@given(first=deletions, second=deletions)
def test_deletion_upserts_are_merge_deletion(
    connection: sqlite3.Connection, first: DeletionTime, second: DeletionTime
) -> None:
    expected = merge_deletion(first, second)
    for order in ((first, second), (second, first)):
        for deletion in order:
            ts, ldt = deletion.marked_for_delete_at_us, deletion.local_deletion_time_s
            _upsert(connection, KIND_ROW_DELETION, ts, 0, ldt, b"")
            connection.execute(UPSERT_PARTITION_ATOM, (1, 7, b"pk", 0, b"", b"", ts, ldt, b""))
        ts, _, ldt, _ = _stored(connection, KIND_ROW_DELETION)
        assert DeletionTime(ts, ldt) == expected
        stored = connection.execute("SELECT ts, ldt FROM partition_atoms").fetchone()
        connection.execute("DELETE FROM partition_atoms")
        assert DeletionTime(*stored) == expected


def test_value_tie_break_is_unsigned_and_shorter_is_smaller(connection: sqlite3.Connection) -> None:
    """Rule 5 spelled out: 0x80 beats 0x7f (unsigned), and b'\\x01\\x00' beats b'\\x01'."""
    for low, high in ((b"\x7f", b"\x80"), (b"\x01", b"\x01\x00"), (b"", b"\x00")):
        for order in ((low, high), (high, low)):
            for value in order:
                _upsert(connection, KIND_CELL, 5, 0, NO_DELETION_TIME, value)
            assert _stored(connection, KIND_CELL)[3] == high
