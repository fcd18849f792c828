"""Store behaviour on a real SQLite file: tables, writes, reads with reconcile, validation.

Each test states the rule it checks; values are checked byte for byte.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BLOB,
    INT,
    TEXT,
    Cell,
    ClusteringBound,
    ClusteringOrder,
    ComplexColumn,
    DeletionTime,
    ListType,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    SetType,
    Table,
)
from ringflow.schema._codec import serialize
from ringflow.storage import (
    BatchTooLarge,
    InvalidMutation,
    MutationTooLarge,
    ResultTooLarge,
    Store,
    StoreLimits,
    TableAlreadyRegistered,
    TooManyTombstones,
    UnknownTable,
)
from tests.unit.storage._tables import COMPOSITE, EVENTS, KV, i32, insert, open_store, txt

NOW = 1_000


def ck(n: int, sub: str = "a") -> tuple[bytes, bytes]:
    return (i32(n), txt(sub))


def clusterings(store: Store, table: Table, pk: tuple[bytes, ...], **kwargs: object) -> list:
    return [row.clustering for row in store.read_partition(table, pk, now_s=NOW, **kwargs)]  # type: ignore[arg-type]


def test_tables_survive_reopen_and_drop_deletes_data(tmp_path: Path) -> None:
    store = open_store(tmp_path, EVENTS, KV)
    store.apply([insert(KV, (txt("a"),), (), {"v": b"1"})], now_s=NOW)
    store.close()
    store = Store(tmp_path / "node.sqlite")
    assert store.tables() == [EVENTS, KV]
    assert store.read_row(KV, (txt("a"),), (), now_s=NOW) is not None
    store.drop_table("ks", "kv")
    assert store.tables() == [EVENTS]
    with pytest.raises(UnknownTable):
        store.read_row(KV, (txt("a"),), (), now_s=NOW)
    store.register_table(KV)  # same name, data gone
    assert store.read_row(KV, (txt("a"),), (), now_s=NOW) is None
    store.close()


def test_register_same_name_other_id_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path, KV)
    other = Table(KV.keyspace, KV.name, KV.columns, KV.options, uuid.uuid4())
    with pytest.raises(TableAlreadyRegistered):
        store.register_table(other)
    store.close()


def test_clustering_order_with_desc_column_slices_and_reverse(tmp_path: Path) -> None:
    """Rows come back in clustering order (ck ASC, sub DESC); bounds are prefix bounds."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    keys = [ck(n, sub) for n in (-2, 0, 1, 3) for sub in ("a", "b")]
    store.apply([insert(EVENTS, pk, key, {"v": txt("x")}) for key in keys], now_s=NOW)
    expected = [ck(n, sub) for n in (-2, 0, 1, 3) for sub in ("b", "a")]
    assert clusterings(store, EVENTS, pk) == expected
    assert clusterings(store, EVENTS, pk, reverse=True) == expected[::-1]
    start, end = ClusteringBound((i32(0),), False), ClusteringBound((i32(3),), True)
    assert clusterings(store, EVENTS, pk, start=start, end=end) == expected[4:]
    start, end = ClusteringBound((i32(0),), True), ClusteringBound((i32(3),), False)
    assert clusterings(store, EVENTS, pk, start=start, end=end) == expected[2:6]
    start = ClusteringBound(ck(0, "a"), False)  # after (0, 'a') in DESC order of sub
    assert clusterings(store, EVENTS, pk, start=start) == expected[4:]
    assert clusterings(store, EVENTS, pk, limit=3, reverse=True) == expected[::-1][:3]
    assert store.read_row(EVENTS, pk, ck(1, "b"), now_s=NOW) is not None
    assert store.read_row(EVENTS, pk, ck(2, "b"), now_s=NOW) is None
    store.close()


def test_static_row_values_and_static_only_row(tmp_path: Path) -> None:
    """Static values appear on every row; a partition with only a live static row yields one
    static-only row for an unrestricted read and nothing for a restricted one (CQL)."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(7),)
    static = Row((), None, None, {"s": Cell.live(5, txt("S"))})
    store.apply([Mutation("ks", "events", pk, static_row=static)], now_s=NOW)
    rows = store.read_partition(EVENTS, pk, now_s=NOW)
    assert [(r.clustering, r.static_only, dict(r.values)) for r in rows] == [
        ((), True, {"s": txt("S")})
    ]
    assert store.read_partition(EVENTS, pk, start=ClusteringBound((i32(0),)), now_s=NOW) == []
    store.apply([insert(EVENTS, pk, ck(1), {"v": txt("v")})], now_s=NOW)
    rows = store.read_partition(EVENTS, pk, now_s=NOW)
    assert [(r.clustering, dict(r.values)) for r in rows] == [
        (ck(1), {"s": txt("S"), "v": txt("v")})
    ]
    assert rows[0].writetime_us == {"s": 5, "v": 10}
    store.close()


def test_ttl_expiry_writetime_and_columns(tmp_path: Path) -> None:
    """A TTL'd cell is live before its expiry second and gone from it; TTL() counts down;
    a row with only expired cells and no marker disappears."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    cells = {"v": Cell.expiring(20, 50, NOW, txt("t")), "n": Cell.live(21, i32(3))}
    update = Mutation("ks", "events", pk, rows=(Row(ck(1), None, None, cells),))
    ttl_only = Row(ck(2), None, None, {"v": Cell.expiring(20, 50, NOW, txt("gone"))})
    store.apply([update, Mutation("ks", "events", pk, rows=(ttl_only,))], now_s=NOW)
    row = store.read_row(EVENTS, pk, ck(1), now_s=NOW + 10)
    assert row is not None
    assert dict(row.values) == {"v": txt("t"), "n": i32(3)}
    assert row.ttl_s == {"v": 40} and row.writetime_us == {"v": 20, "n": 21}
    row = store.read_row(EVENTS, pk, ck(1), columns=["n"], now_s=NOW + 50)
    assert row is not None and dict(row.values) == {"n": i32(3)}
    assert clusterings(store, EVENTS, pk) == [ck(1), ck(2)]
    assert store.read_partition(EVENTS, pk, now_s=NOW + 50, columns=["v"])[0].values == {}
    assert [r.clustering for r in store.read_partition(EVENTS, pk, now_s=NOW + 50)] == [ck(1)]
    store.close()


def test_deletions_shadow_at_equal_timestamp(tmp_path: Path) -> None:
    """Partition, range, row and cell deletions shadow data at or before their timestamp."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    store.apply([insert(EVENTS, pk, ck(n), {"v": txt(str(n))}, 10) for n in range(6)], now_s=NOW)
    range_delete = RangeTombstone(
        ClusteringBound((i32(1),), True), ClusteringBound((i32(2),), True), DeletionTime(10, NOW)
    )
    row_delete = Row(ck(4), None, DeletionTime(9, NOW))  # older than the row: no effect
    cell_delete = Row(ck(5), None, None, {"v": Cell.tombstone(10, NOW)})
    store.apply(
        [Mutation("ks", "events", pk, None, None, (row_delete, cell_delete), (range_delete,))],
        now_s=NOW,
    )
    assert clusterings(store, EVENTS, pk) == [ck(0), ck(3), ck(4), ck(5)]
    assert store.read_row(EVENTS, pk, ck(5), now_s=NOW).values == {}  # type: ignore[union-attr]
    store.apply([Mutation("ks", "events", pk, DeletionTime(10, NOW))], now_s=NOW)
    assert clusterings(store, EVENTS, pk) == []
    store.apply([insert(EVENTS, pk, ck(9), {"v": txt("new")}, 11)], now_s=NOW)
    assert clusterings(store, EVENTS, pk) == [ck(9)]
    store.close()


def test_collections_read_as_frozen_values_in_type_order(tmp_path: Path) -> None:
    """A non-frozen collection reads as its frozen serialization, elements in the collection's
    order; a collection tombstone removes older elements only."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    tags = ComplexColumn(tuple(Cell.live(10, b"", txt(t)) for t in ("b", "a", "c")))
    attrs = ComplexColumn(
        tuple(Cell.live(10, txt(v), i32(k)) for k, v in ((5, "five"), (-1, "minus")))
    )
    store.apply(
        [
            Mutation(
                "ks", "events", pk, rows=(Row(ck(1), None, None, {"tags": tags, "attrs": attrs}),)
            )
        ],
        now_s=NOW,
    )
    row = store.read_row(EVENTS, pk, ck(1), now_s=NOW)
    assert row is not None
    assert row.values["tags"] == serialize(SetType(TEXT), {"a", "b", "c"})
    assert row.values["attrs"] == serialize(EVENTS.column("attrs").type, {-1: "minus", 5: "five"})
    reset = ComplexColumn((Cell.live(12, b"", txt("z")),), DeletionTime(11, NOW))
    store.apply(
        [Mutation("ks", "events", pk, rows=(Row(ck(1), None, None, {"tags": reset}),))], now_s=NOW
    )
    row = store.read_row(EVENTS, pk, ck(1), now_s=NOW)
    assert row is not None and row.values["tags"] == serialize(SetType(TEXT), {"z"})
    store.close()


def test_list_elements_ordered_by_timeuuid_path(tmp_path: Path) -> None:
    from ringflow.schema import timeuuid_from_micros

    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    paths = [timeuuid_from_micros(t, 0x8000_0000_0000_0000 + t).bytes for t in (3, 1, 2)]
    items = ComplexColumn(
        tuple(Cell.live(10, i32(n), p) for n, p in zip((30, 10, 20), paths, strict=True))
    )
    store.apply(
        [Mutation("ks", "events", pk, rows=(Row(ck(1), None, None, {"items": items}),))], now_s=NOW
    )
    row = store.read_row(EVENTS, pk, ck(1), now_s=NOW)
    assert row is not None and row.values["items"] == serialize(ListType(INT), [10, 20, 30])
    store.close()


def test_read_mutation_returns_stored_state_with_tombstones(tmp_path: Path) -> None:
    store = open_store(tmp_path, COMPOSITE)
    pk = (i32(1), txt("x"))
    rt = RangeTombstone(ClusteringBound((i32(3),)), ClusteringBound(), DeletionTime(5, NOW))
    written = Mutation(
        "ks",
        "composite",
        pk,
        DeletionTime(1, NOW),
        None,
        (
            Row((i32(1),), LivenessInfo(10), None, {"v": Cell.live(10, txt("a"))}),
            Row((i32(2),), None, DeletionTime(4, NOW), {"v": Cell.tombstone(3, NOW)}),
        ),
        (rt,),
    )
    store.apply([written], now_s=NOW)
    assert store.read_mutation(COMPOSITE, pk) == written
    assert store.read_mutation(COMPOSITE, (i32(2), txt("x"))) is None
    store.close()


@pytest.mark.parametrize(
    ("mutation", "error"),
    [
        (Mutation("ks", "nope", (i32(1),)), UnknownTable),
        (Mutation("ks", "events", (i32(1), i32(2))), InvalidMutation),
        (Mutation("ks", "events", (b"",)), InvalidMutation),
        (Mutation("ks", "events", (i32(1),), rows=(Row((i32(1),)),)), InvalidMutation),
        (
            Mutation(
                "ks", "events", (i32(1),), rows=(Row(ck(1), None, None, {"zz": Cell.live(1, b"")}),)
            ),
            InvalidMutation,
        ),
        (
            Mutation(
                "ks", "events", (i32(1),), rows=(Row(ck(1), None, None, {"s": Cell.live(1, b"")}),)
            ),
            InvalidMutation,
        ),
        (
            Mutation(
                "ks",
                "events",
                (i32(1),),
                rows=(Row(ck(1), None, None, {"tags": Cell.live(1, b"")}),),
            ),
            InvalidMutation,
        ),
        (
            Mutation(
                "ks", "events", (i32(1),), rows=(Row(ck(1), None, None, {"v": Cell(2**63, b"")}),)
            ),
            InvalidMutation,
        ),
        (Mutation("ks", "kv", (txt("k"),), static_row=Row((), None, None, {})), InvalidMutation),
        (Mutation("ks", "events", (i32(1),), rows=(Row((b"\x00", txt("a"))),)), InvalidRequest),
    ],
)
def test_bad_mutation_fails_whole_batch_with_nothing_written(
    tmp_path: Path, mutation: Mutation, error: type[Exception]
) -> None:
    store = open_store(tmp_path, EVENTS, KV)
    good = insert(EVENTS, (i32(1),), ck(1), {"v": txt("v")})
    with pytest.raises(error) as raised:
        store.apply([good, mutation], now_s=NOW)
    assert isinstance(raised.value, InvalidRequest)
    assert store.read_partition(EVENTS, (i32(1),), now_s=NOW) == []
    store.close()


def test_limits_refuse_with_figures_and_write_nothing(tmp_path: Path) -> None:
    limits = StoreLimits(
        max_mutation_size_bytes=1000, max_batch_cells=10, max_result_rows=5,
        max_tombstones_per_read=20, max_batch_mutations=3,
    )  # fmt: skip
    store = Store(tmp_path / "node.sqlite", limits=limits)
    store.register_table(KV)
    store.register_table(EVENTS)
    big = insert(KV, (txt("a"),), (), {"v": b"x" * 2000})
    with pytest.raises(MutationTooLarge, match="exceeds the limit of 1000 bytes"):
        store.apply([big], now_s=NOW)
    many = [insert(KV, (txt(str(n)),), (), {"v": b"x"}) for n in range(3)]
    many.append(insert(KV, (txt("z"),), (), {"v": b"x"}))
    with pytest.raises(BatchTooLarge, match="4 mutations exceeds the limit of 3"):
        store.apply(many, now_s=NOW)
    pk = (i32(1),)
    two_rows = [
        Mutation(
            "ks",
            "events",
            pk,
            rows=(
                Row(ck(n), LivenessInfo(1), None, {"v": Cell.live(1, b"")}),
                Row(
                    ck(n + 10),
                    LivenessInfo(1),
                    None,
                    {"v": Cell.live(1, b""), "n": Cell.live(1, b"")},
                ),
            ),
        )
        for n in range(3)
    ]
    with pytest.raises(BatchTooLarge, match="limit of 10 cells"):
        store.apply(two_rows, now_s=NOW)
    assert store.read_mutation(KV, (txt("0"),)) is None
    assert store.read_mutation(EVENTS, pk) is None
    for start in range(0, 6, 2):
        store.apply(
            [insert(EVENTS, pk, ck(n), {"v": txt("v")}) for n in range(start, start + 2)], now_s=NOW
        )
    with pytest.raises(ResultTooLarge):
        store.read_partition(EVENTS, pk, now_s=NOW)
    assert len(store.read_partition(EVENTS, pk, now_s=NOW, limit=5)) == 5
    deletes = [
        Mutation("ks", "events", (i32(2),), rows=(Row(ck(n), None, DeletionTime(1, NOW)),))
        for n in range(21)
    ]
    for start in range(0, 21, 3):
        store.apply(deletes[start : start + 3], now_s=NOW)
    with pytest.raises(TooManyTombstones, match="more than 20 tombstones"):
        store.read_partition(EVENTS, (i32(2),), now_s=NOW)
    store.close()


def test_store_limits_validate() -> None:
    with pytest.raises(InvalidRequest):
        StoreLimits(max_batch_cells=0)


def test_store_is_usable_from_a_worker_thread(tmp_path: Path) -> None:
    """The asyncio shell will run the store in a thread: calls from another thread work."""
    import threading

    store = open_store(tmp_path, KV)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            store.apply([insert(KV, (txt("t"),), (), {"v": b"from thread"})], now_s=NOW)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors == []
    row = store.read_row(KV, (txt("t"),), (), now_s=NOW)
    assert row is not None and row.values["v"] == b"from thread"
    store.close()


def test_constructor_arguments_are_validated(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest):
        Store(tmp_path / "a.sqlite", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        Store(tmp_path / "b.sqlite", wal_autocheckpoint_pages=0)


def test_read_mutation_of_a_slice_gives_its_rows_the_static_row_and_every_tombstone(
    tmp_path: Path,
) -> None:
    """A coordinated read of a clustering slice ships only the slice's rows, with the static
    row and all partition-level tombstones, so the slice reads back as from the whole."""
    store = open_store(tmp_path, EVENTS)
    pk = (i32(1),)
    rows = tuple(
        Row((i32(n), txt("a")), LivenessInfo(10), None, {"v": Cell.live(10, txt(f"v{n}"))})
        for n in range(6)
    )
    static = Row((), None, None, {"s": Cell.live(5, txt("S"))})
    rt = RangeTombstone(ClusteringBound((i32(4),)), ClusteringBound(), DeletionTime(11, NOW))
    written = Mutation("ks", "events", pk, DeletionTime(1, NOW), static, rows, (rt,))
    store.apply([written], now_s=NOW)
    start, end = ClusteringBound((i32(2),), False), ClusteringBound((i32(4),), True)
    sliced = store.read_mutation(EVENTS, pk, start=start, end=end)
    assert sliced == Mutation("ks", "events", pk, DeletionTime(1, NOW), static, rows[3:5], (rt,))
    assert store.read_mutation(EVENTS, pk) == written  # unbounded: the whole partition
    (tmp_path / "copy").mkdir()
    copy = open_store(tmp_path / "copy", EVENTS)
    assert sliced is not None
    copy.apply([sliced], now_s=NOW)
    expected = store.read_partition(EVENTS, pk, start=start, end=end, now_s=NOW)
    assert [r.clustering for r in expected] == [rows[3].clustering]  # row 4: range-deleted
    assert copy.read_partition(EVENTS, pk, start=start, end=end, now_s=NOW) == expected
    empty = ClusteringBound((i32(9),))
    assert store.read_mutation(EVENTS, pk, start=empty, end=empty) == Mutation(
        "ks", "events", pk, DeletionTime(1, NOW), static, (), (rt,)
    )
    assert store.read_mutation(EVENTS, (i32(2),), start=start, end=end) is None
    store.close()
    copy.close()


def test_a_mutation_with_cells_of_a_dropped_column_is_taken_without_them(tmp_path: Path) -> None:
    """Cassandra's deserializer maps a dropped column's cells to the dropped column and never
    shows them: a replica takes such a mutation (from a peer the DROP has not reached, or a read
    repair reconciled from a replica that still had the column when it answered). Before, it
    refused the whole mutation ("no regular column 'w'") and a QUORUM read waiting for that
    repair's ack timed out. A column the table never had is still refused, and a column added
    again takes its new cells."""
    wide = Table.create(
        "ks",
        "wide",
        partition_key=[("k", TEXT)],
        clustering=[("c", INT, ClusteringOrder.ASC)],
        static=[("s", BLOB)],
        regular=[("v", BLOB), ("w", BLOB)],
        table_id=uuid.UUID(int=9),
    )
    store = open_store(tmp_path, wide)
    key, row = (txt("a"),), (i32(1),)
    store.apply([insert(wide, key, row, {"v": b"1", "w": b"2"})], now_s=NOW)
    dropped = Table.create(
        "ks",
        "wide",
        partition_key=[("k", TEXT)],
        clustering=[("c", INT, ClusteringOrder.ASC)],
        regular=[("v", BLOB)],
        table_id=wide.id,
    )
    dropped = dropped.with_dropped_column("w", 20).with_dropped_column("s", 20)
    store.register_table(dropped)

    stale = Mutation(
        "ks",
        "wide",
        key,
        static_row=Row((), cells={"s": Cell.live(30, b"s")}),
        rows=(
            Row(row, cells={"v": Cell.live(30, b"3"), "w": Cell.live(30, b"4")}),
            Row((i32(2),), cells={"w": Cell.live(30, b"5")}),  # nothing left: no row
        ),
    )
    store.apply([stale], now_s=NOW)
    (only,) = store.read_partition(dropped, key, now_s=NOW)
    assert (only.clustering, dict(only.values)) == (row, {"v": b"3"})
    held = store.read_mutation(dropped, key)
    assert held is not None and held.static_row is None and len(held.rows) == 1

    never = Mutation("ks", "wide", key, rows=(Row(row, cells={"x": Cell.live(40, b"x")}),))
    with pytest.raises(InvalidMutation, match="no regular column 'x'"):
        store.apply([never], now_s=NOW)

    again = Table.create(
        "ks",
        "wide",
        partition_key=[("k", TEXT)],
        clustering=[("c", INT, ClusteringOrder.ASC)],
        regular=[("v", BLOB), ("w", BLOB)],
        table_id=wide.id,
    ).with_dropped_column("w", 20)
    store.register_table(again)
    store.apply([insert(again, key, row, {"w": b"6"}, timestamp_us=50)], now_s=NOW)
    (only,) = store.read_partition(again, key, now_s=NOW)
    assert (dict(only.values), only.writetime_us["w"]) == ({"v": b"3", "w": b"6"}, 50)
    store.close()
