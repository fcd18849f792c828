"""Example tests for LWW reconcile, shadowing, expiry and purge (cassandra-core.md §6).

The cell table follows Cassandra's CellTest: one case per rule of §6.1, plus cases where an
earlier rule must win over a later one, each checked in both argument orders.
"""

from __future__ import annotations

import pytest

from ringflow.errors import InternalError
from ringflow.schema import (
    EXPIRED_LIVENESS_TTL_S,
    NO_DELETION_TIME,
    Cell,
    ClusteringBound,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
    covering_deletions,
    expire_row,
    is_expired_liveness,
    is_row_empty,
    is_row_live,
    live_cells,
    merge_complex,
    merge_deletion,
    merge_mutations,
    merge_rows,
    purge_mutation,
    purge_row,
    reconcile_cells,
    reconcile_liveness,
    shadow_mutation,
    shadow_row,
)


def live(ts: int, value: bytes, path: bytes | None = None) -> Cell:
    return Cell.live(ts, value, path)


def expiring(ts: int, ttl_s: int, ldt_s: int, value: bytes, path: bytes | None = None) -> Cell:
    return Cell(ts, value, ttl_s, ldt_s, path)


def tombstone(ts: int, ldt_s: int, path: bytes | None = None) -> Cell:
    return Cell.tombstone(ts, ldt_s, path)


def compare_bytes(a: tuple[bytes, ...], b: tuple[bytes, ...]) -> int:
    return (a > b) - (a < b)


# --- reconcile_cells: one case per rule, and rule order ---------------------------------------

CELL_CASES = [
    ("1 higher timestamp beats a greater value", live(2, b"a"), live(1, b"z"), "left"),
    (
        "1 newer live beats an older tombstone (before rule 2)",
        live(2, b"a"),
        tombstone(1, 9),
        "left",
    ),
    (
        "1 newer live beats an older expiring cell",
        expiring(1, 10, 60, b"z"),
        live(2, b"a"),
        "right",
    ),
    (
        "1 newer expiring beats an older tombstone (before 3)",
        expiring(2, 5, 9, b""),
        tombstone(1, 99),
        "left",
    ),
    ("2 tombstone beats live at equal ts", tombstone(1, 50), live(1, b"z"), "left"),
    (
        "2 expiring beats live at equal ts (before rule 5)",
        expiring(1, 10, 60, b"a"),
        live(1, b"z"),
        "left",
    ),
    (
        "2 expired-long-ago still beats live: no clock",
        expiring(1, 1, 2, b""),
        live(1, b"\xff"),
        "left",
    ),
    (
        "3 tombstone beats expiring with larger ldt (before 4)",
        tombstone(1, 5),
        expiring(1, 10, 60, b"z"),
        "left",
    ),
    ("4 both tombstones: larger ldt", tombstone(1, 5), tombstone(1, 6), "right"),
    (
        "4 both expiring: larger ldt beats greater value (before 5)",
        expiring(1, 10, 60, b"z"),
        expiring(1, 20, 70, b"a"),
        "right",
    ),
    ("5 both live: greater value", live(1, b"a"), live(1, b"b"), "right"),
    ("5 unsigned bytes: 0x80 beats 0x7f", live(1, b"\x80"), live(1, b"\x7f"), "left"),
    ("5 shorter is smaller", live(1, b"\x01"), live(1, b"\x01\x00"), "right"),
    ("5 empty is smallest", live(1, b""), live(1, b"\x00"), "right"),
    (
        "5 both expiring, equal ldt: greater value",
        expiring(1, 10, 60, b"a"),
        expiring(1, 10, 60, b"b"),
        "right",
    ),
    ("5 both tombstones, equal ldt: greater value", Cell(1, b"x", 0, 5), tombstone(1, 5), "left"),
    (
        "tie-break: equal ldt and value: lower ttl",
        expiring(1, 10, 60, b"a"),
        expiring(1, 20, 60, b"a"),
        "left",
    ),
]


@pytest.mark.parametrize(
    ("left", "right", "winner"),
    [case[1:] for case in CELL_CASES],
    ids=[case[0] for case in CELL_CASES],
)
def test_reconcile_cells_rule(left: Cell, right: Cell, winner: str) -> None:
    expected = left if winner == "left" else right
    assert reconcile_cells(left, right) is expected
    assert reconcile_cells(right, left) is expected


def test_reconcile_cells_complete_equality_returns_left() -> None:
    left, right = expiring(3, 10, 60, b"v", b"p"), expiring(3, 10, 60, b"v", b"p")
    assert reconcile_cells(left, right) is left
    assert reconcile_cells(right, left) is right


def test_reconcile_cells_refuses_different_paths() -> None:
    with pytest.raises(InternalError, match="paths"):
        reconcile_cells(live(1, b"a", b"\x01"), live(1, b"a", b"\x02"))


# --- liveness and deletions -------------------------------------------------------------------

EXPIRED_MARKER = LivenessInfo(5, EXPIRED_LIVENESS_TTL_S, 100)
LIVENESS_CASES = [
    ("higher timestamp", LivenessInfo(6), LivenessInfo(5, 10, 999), "left"),
    ("expired marker beats expiring", EXPIRED_MARKER, LivenessInfo(5, 10, 999), "left"),
    ("expired marker beats plain", LivenessInfo(5), EXPIRED_MARKER, "right"),
    ("both expiring: larger expiration", LivenessInfo(5, 10, 50), LivenessInfo(5, 1, 60), "right"),
    ("expiring beats plain at equal ts", LivenessInfo(5), LivenessInfo(5, 10, 50), "right"),
    ("equal expiration: lower ttl", LivenessInfo(5, 10, 50), LivenessInfo(5, 20, 50), "left"),
]


@pytest.mark.parametrize(
    ("left", "right", "winner"),
    [case[1:] for case in LIVENESS_CASES],
    ids=[case[0] for case in LIVENESS_CASES],
)
def test_reconcile_liveness_rule(left: LivenessInfo, right: LivenessInfo, winner: str) -> None:
    expected = left if winner == "left" else right
    assert reconcile_liveness(left, right) is expected
    assert reconcile_liveness(right, left) is expected


def test_reconcile_liveness_none_is_no_marker() -> None:
    marker = LivenessInfo(1)
    assert reconcile_liveness(None, marker) is marker
    assert reconcile_liveness(marker, None) is marker
    assert reconcile_liveness(None, None) is None


def test_merge_deletion_picks_superseding() -> None:
    older, newer, later_local = DeletionTime(5, 100), DeletionTime(6, 1), DeletionTime(5, 200)
    assert merge_deletion(older, newer) is newer
    assert merge_deletion(newer, older) is newer
    assert merge_deletion(older, later_local) is later_local
    assert merge_deletion(None, older) is older
    assert merge_deletion(older, None) is older
    assert merge_deletion(None, None) is None


# --- collections and rows ---------------------------------------------------------------------


def test_merge_complex_merges_by_path_and_sorts_unsigned() -> None:
    a = ComplexColumn((live(1, b"a", b"\x01"), live(1, b"x", b"\x80")))
    b = ComplexColumn((live(2, b"b", b"\x01"), live(1, b"y", b"\x7f")))
    merged = merge_complex(a, b)
    assert [cell.path for cell in merged.cells] == [b"\x01", b"\x7f", b"\x80"]
    assert merged.cells[0] == live(2, b"b", b"\x01")
    assert merged.deletion is None


def test_merge_complex_tombstone_drops_elements_at_or_before_it() -> None:
    a = ComplexColumn((live(4, b"a", b"\x01"), live(5, b"b", b"\x02"), live(6, b"c", b"\x03")))
    b = ComplexColumn((), DeletionTime(5, 10))
    merged = merge_complex(a, b)
    assert merged.cells == (live(6, b"c", b"\x03"),)
    assert merged.deletion == DeletionTime(5, 10)


def test_merge_rows_row_deletion_shadows_equal_and_older_data() -> None:
    inserted = Row((b"k",), LivenessInfo(5), None, {"a": live(5, b"old"), "b": live(7, b"new")})
    deleted = Row((b"k",), None, DeletionTime(5, 100), {})
    merged = merge_rows(inserted, deleted)
    assert merged == Row((b"k",), None, DeletionTime(5, 100), {"b": live(7, b"new")})
    assert merge_rows(deleted, inserted) == merged


def test_merge_rows_merges_each_column_independently() -> None:
    a = Row((), None, None, {"a": live(1, b"a1"), "b": live(3, b"b3")})
    b = Row((), LivenessInfo(2), None, {"a": live(2, b"a2"), "c": tombstone(1, 5)})
    merged = merge_rows(a, b)
    assert dict(merged.cells) == {"a": live(2, b"a2"), "b": live(3, b"b3"), "c": tombstone(1, 5)}
    assert merged.liveness == LivenessInfo(2)


def test_merge_rows_refuses_different_clusterings_and_kinds() -> None:
    with pytest.raises(InternalError, match="clusterings"):
        merge_rows(Row((b"1",)), Row((b"2",)))
    with pytest.raises(InternalError, match="collection"):
        merge_rows(Row((), cells={"a": live(1, b"")}), Row((), cells={"a": ComplexColumn()}))


def test_shadow_row_at_equal_timestamp() -> None:
    row = Row(
        (b"k",),
        LivenessInfo(10),
        None,
        {
            "at": live(10, b"x"),
            "after": live(11, b"y"),
            "m": ComplexColumn((live(10, b"", b"\x01"), live(11, b"", b"\x02"))),
        },
    )
    shadowed = shadow_row(row, [DeletionTime(3, 1), DeletionTime(10, 50)])
    assert shadowed.liveness is None
    assert dict(shadowed.cells) == {
        "after": live(11, b"y"),
        "m": ComplexColumn((live(11, b"", b"\x02"),)),
    }
    assert shadow_row(row, [DeletionTime(9, 50)]) == row


def test_shadow_row_drops_superseded_tombstones_only() -> None:
    row = Row((), None, DeletionTime(4, 40), {"m": ComplexColumn((), DeletionTime(3, 30))})
    assert shadow_row(row, []) == Row((), None, DeletionTime(4, 40), {})
    equal = shadow_row(row, [DeletionTime(4, 40)])
    assert equal.deletion == DeletionTime(4, 40)
    assert shadow_row(row, [DeletionTime(5, 1)]) == Row((), None, None, {})


# --- TTL expiry -------------------------------------------------------------------------------


def test_expiring_cell_is_live_before_its_expiry_second_only() -> None:
    cell = Cell.expiring(7, ttl_s=10, now_s=100, value=b"v")
    assert cell.local_deletion_time_s == 110
    row = Row((), None, None, {"a": cell})
    assert expire_row(row, 109) == row
    assert live_cells(row, 109) == {"a": cell}
    assert dict(expire_row(row, 110).cells) == {"a": Cell(7, b"", 0, 100)}
    expired = expire_row(row, 110).cells["a"]
    assert isinstance(expired, Cell) and expired.is_tombstone
    assert live_cells(row, 110) == {}


def test_expire_row_collection_elements_and_live_data_untouched() -> None:
    row = Row(
        (),
        None,
        None,
        {
            "plain": live(1, b"p"),
            "m": ComplexColumn(
                (expiring(1, 5, 20, b"e", b"\x01"), live(1, b"l", b"\x02")), DeletionTime(0, 3)
            ),
        },
    )
    expired = expire_row(row, 20)
    assert expired.cells["plain"] == live(1, b"p")
    assert expired.cells["m"] == ComplexColumn(
        (tombstone(1, 15, b"\x01"), live(1, b"l", b"\x02")), DeletionTime(0, 3)
    )


def test_expired_liveness_becomes_expired_marker_and_still_supersedes() -> None:
    row = Row((b"k",), LivenessInfo(8, 10, 110), None, {})
    assert is_row_live(row, 109)
    expired = expire_row(row, 110)
    assert expired.liveness == LivenessInfo(8, EXPIRED_LIVENESS_TTL_S, 100)
    assert expired.liveness is not None and is_expired_liveness(expired.liveness)
    assert not is_row_live(expired, 110)
    assert not is_row_live(expired, 50)  # dead even under an earlier clock
    older_plain_insert = Row((b"k",), LivenessInfo(3), None, {})
    assert not is_row_live(merge_rows(expired, older_plain_insert), 200)
    same_ts_unexpired = Row((b"k",), LivenessInfo(8, 10, 110), None, {})
    assert merge_rows(same_ts_unexpired, expired).liveness == expired.liveness
    assert expire_row(expired, 500) == expired


# --- gc_grace purge ---------------------------------------------------------------------------


def test_purge_row_boundary_is_strictly_before_gc_before() -> None:
    cells: dict[str, Cell | ComplexColumn] = {
        "t": tombstone(2, 100),
        "m": ComplexColumn((tombstone(2, 100, b"\x01"),), DeletionTime(1, 100)),
    }
    row = Row((b"k",), LivenessInfo(1, EXPIRED_LIVENESS_TTL_S, 99), DeletionTime(0, 100), cells)
    assert purge_row(row, 100) == Row((b"k",), None, DeletionTime(0, 100), cells)
    assert is_row_empty(purge_row(row, 101))


def test_purge_row_applies_the_row_deletion_before_dropping_it() -> None:
    row = Row((b"k",), LivenessInfo(1), DeletionTime(1, 10), {"a": live(1, b"shadowed")})
    purged = purge_row(row, 50)
    assert is_row_empty(purged)
    assert not is_row_live(purged, 60)


def test_purge_row_keeps_live_data_and_drops_long_expired_cells() -> None:
    row = Row(
        (),
        LivenessInfo(1),
        None,
        {
            "live": live(1, b"v"),
            "expired": expiring(1, 10, 50, b"x"),
            "later": expiring(1, 10, 500, b"y"),
        },
    )
    purged = purge_row(row, 60)
    assert purged.liveness == LivenessInfo(1)
    assert dict(purged.cells) == {"live": live(1, b"v"), "later": expiring(1, 10, 500, b"y")}


def test_purge_mutation_drops_partition_and_range_tombstones_and_empty_rows() -> None:
    old, recent = DeletionTime(1, 10), DeletionTime(1, 90)
    whole = RangeTombstone(ClusteringBound(), ClusteringBound(), old)
    kept = RangeTombstone(ClusteringBound((b"a",)), ClusteringBound((b"b",)), recent)
    mutation = Mutation(
        "ks",
        "t",
        (b"pk",),
        old,
        Row((), None, None, {"s": tombstone(1, 10)}),
        (Row((b"a",), None, old, {}), Row((b"b",), None, recent, {})),
        (whole, kept),
    )
    purged = purge_mutation(mutation, 50)
    assert purged == Mutation(
        "ks", "t", (b"pk",), None, None, (Row((b"b",), None, recent, {}),), (kept,)
    )


# --- the read view ----------------------------------------------------------------------------


def test_is_row_live_cql_existence() -> None:
    assert is_row_live(Row((b"k",), LivenessInfo(1), None, {}), 0)  # INSERT of the key only
    assert is_row_live(Row((b"k",), None, None, {"a": live(1, b"")}), 0)  # UPDATE, empty value
    assert not is_row_live(Row((b"k",), None, None, {"a": tombstone(1, 1)}), 0)  # all nulled
    deleted_marker = Row((b"k",), LivenessInfo(1), DeletionTime(1, 1), {"a": live(2, b"v")})
    assert is_row_live(deleted_marker, 0)  # marker deleted, newer cell keeps the row
    assert not is_row_live(Row((b"k",), LivenessInfo(1), DeletionTime(1, 1), {}), 0)
    static = Row((), None, None, {"s": ComplexColumn((tombstone(1, 1, b"\x01"),))})
    assert not is_row_live(static, 0)


def test_live_cells_resolves_collections() -> None:
    row = Row(
        (),
        None,
        None,
        {
            "dead_map": ComplexColumn((tombstone(2, 1, b"\x01"),)),
            "m": ComplexColumn((live(1, b"x", b"\x01"), tombstone(2, 1, b"\x02"))),
            "s": live(3, b"v"),
        },
    )
    assert live_cells(row, 0) == {"m": [live(1, b"x", b"\x01")], "s": live(3, b"v")}


# --- range tombstone coverage -----------------------------------------------------------------


def _rt(
    start: tuple[bytes, ...],
    start_inclusive: bool,
    end: tuple[bytes, ...],
    end_inclusive: bool,
    ts: int = 9,
) -> RangeTombstone:
    return RangeTombstone(
        ClusteringBound(start, start_inclusive),
        ClusteringBound(end, end_inclusive),
        DeletionTime(ts, 1),
    )


COVERAGE_CASES = [
    (
        "inclusive prefix covers extending keys",
        _rt((b"1",), True, (b"3",), True),
        (b"1", b"z"),
        True,
    ),
    (
        "inclusive end covers extending keys",
        _rt((b"1",), True, (b"3",), True),
        (b"3", b"\xff"),
        True,
    ),
    ("inside", _rt((b"1",), True, (b"3",), True), (b"2", b"a"), True),
    ("before start", _rt((b"1",), True, (b"3",), True), (b"0", b"z"), False),
    ("after end", _rt((b"1",), True, (b"3",), True), (b"4", b""), False),
    (
        "exclusive start excludes every extension",
        _rt((b"1",), False, (b"3",), True),
        (b"1", b"z"),
        False,
    ),
    (
        "exclusive end excludes every extension",
        _rt((b"1",), True, (b"3",), False),
        (b"3", b""),
        False,
    ),
    ("full key exclusive start", _rt((b"1", b"5"), False, (), True), (b"1", b"5"), False),
    ("full key just after exclusive start", _rt((b"1", b"5"), False, (), True), (b"1", b"6"), True),
    ("full key inclusive end", _rt((), True, (b"1", b"5"), True), (b"1", b"5"), True),
    ("unbounded both ends", _rt((), False, (), False), (b"\x00", b""), True),
    ("unbounded start", _rt((), True, (b"3",), False), (b"0", b"a"), True),
    ("unbounded end", _rt((b"3",), True, (), True), (b"\xff", b"a"), True),
    ("unsigned order", _rt((b"\x7f",), False, (), True), (b"\x80", b""), True),
]


@pytest.mark.parametrize(
    ("tombstone", "clustering", "covered"),
    [case[1:] for case in COVERAGE_CASES],
    ids=[case[0] for case in COVERAGE_CASES],
)
def test_covering_deletions(
    tombstone: RangeTombstone, clustering: tuple[bytes, ...], covered: bool
) -> None:
    expected = [tombstone.deletion] if covered else []
    assert covering_deletions(clustering, [tombstone], compare_bytes) == expected


def test_covering_deletions_uses_the_given_order() -> None:
    def descending(a: tuple[bytes, ...], b: tuple[bytes, ...]) -> int:
        return -compare_bytes(a, b)

    # In a DESC clustering, start (3) comes before end (1).
    tombstone = _rt((b"3",), True, (b"1",), True)
    assert covering_deletions((b"2", b""), [tombstone], descending) == [tombstone.deletion]
    assert covering_deletions((b"2", b""), [tombstone], compare_bytes) == []


def test_covering_deletions_keeps_input_order_and_refuses_long_prefix() -> None:
    first, second = _rt((), True, (), True, ts=1), _rt((b"a",), True, (b"a",), True, ts=2)
    assert covering_deletions((b"a",), [first, second], compare_bytes) == [
        first.deletion,
        second.deletion,
    ]
    with pytest.raises(InternalError, match="longer"):
        covering_deletions((b"a",), [_rt((b"a", b"b"), True, (), True)], compare_bytes)


# --- mutations --------------------------------------------------------------------------------


def _mutation(**parts: object) -> Mutation:
    return Mutation("ks", "t", (b"pk",), **parts)  # type: ignore[arg-type]


def test_merge_mutations_combines_every_part() -> None:
    rt_a = _rt((b"1",), True, (b"2",), True, ts=3)
    rt_b_same_bounds_newer = _rt((b"1",), True, (b"2",), True, ts=4)
    rt_b_other = _rt((b"5",), True, (), True, ts=1)
    a = _mutation(
        partition_deletion=DeletionTime(1, 1),
        static_row=Row((), None, None, {"s": live(1, b"a")}),
        rows=(Row((b"\x80",), LivenessInfo(1)), Row((b"\x01",), None, None, {"v": live(1, b"x")})),
        range_tombstones=(rt_a,),
    )
    b = _mutation(
        partition_deletion=DeletionTime(2, 0),
        static_row=Row((), None, None, {"s": live(2, b"b")}),
        rows=(Row((b"\x01",), None, None, {"v": live(2, b"y")}),),
        range_tombstones=(rt_b_other, rt_b_same_bounds_newer),
    )
    merged = merge_mutations(a, b)
    assert merged == _mutation(
        partition_deletion=DeletionTime(2, 0),
        static_row=Row((), None, None, {"s": live(2, b"b")}),
        rows=(Row((b"\x01",), None, None, {"v": live(2, b"y")}), Row((b"\x80",), LivenessInfo(1))),
        range_tombstones=(rt_b_same_bounds_newer, rt_b_other),
    )
    assert merge_mutations(b, a) == merged


def test_merge_mutations_refuses_other_partition() -> None:
    with pytest.raises(InternalError, match="different partitions"):
        merge_mutations(_mutation(), Mutation("ks", "t", (b"other",)))


def test_shadow_mutation_applies_partition_and_range_deletions() -> None:
    mutation = _mutation(
        partition_deletion=DeletionTime(2, 1),
        static_row=Row((), None, None, {"s": live(3, b"static")}),
        rows=(
            Row((b"a",), LivenessInfo(2), None, {"v": live(3, b"kept")}),
            Row((b"b",), LivenessInfo(4), None, {"v": live(4, b"gone")}),
            Row((b"c",), LivenessInfo(5)),
        ),
        range_tombstones=(_rt((b"b",), True, (b"b",), True, ts=4),),
    )
    shadowed = shadow_mutation(mutation, compare_bytes)
    assert shadowed.static_row == Row((), None, None, {"s": live(3, b"static")})
    assert shadowed.rows == (
        Row((b"a",), None, None, {"v": live(3, b"kept")}),
        Row((b"c",), LivenessInfo(5)),
    )
    assert shadowed.range_tombstones == mutation.range_tombstones
    assert shadowed.partition_deletion == mutation.partition_deletion


def test_no_deletion_time_constant_matches_cells() -> None:
    assert live(1, b"").local_deletion_time_s == NO_DELETION_TIME
