"""Properties of LWW reconcile (cassandra-core.md §6) checked with Hypothesis.

Merges are commutative, associative and idempotent with structurally equal results (replicas
converge whatever order writes arrive in), and the read view of merged writes equals a model that
replays all writes sorted by timestamp and §6.1's tie-breaks, last one winning.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

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
    is_row_live,
    live_cells,
    merge_mutations,
    merge_rows,
    purge_row,
    reconcile_cells,
    shadow_mutation,
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)

timestamps = st.integers(0, 6)
seconds = st.integers(0, 30)
values = st.sampled_from([b"", b"\x00", b"\x01", b"\x01\x00", b"\x7f", b"\x80", b"\xff"])
paths = st.sampled_from([b"\x00", b"\x01", b"\x7f", b"\x80"])
SIMPLE_COLUMNS = ("a", "b")
COMPLEX_COLUMN = "m"


@st.composite
def cells(draw: st.DrawFn, path: bytes | None = None) -> Cell:
    timestamp_us = draw(timestamps)
    kind = draw(st.sampled_from(["live", "expiring", "tombstone"]))
    if kind == "live":
        return Cell.live(timestamp_us, draw(values), path)
    if kind == "tombstone":
        return Cell.tombstone(timestamp_us, draw(seconds), path)
    return Cell.expiring(timestamp_us, draw(st.integers(1, 10)), draw(seconds), draw(values), path)


deletions = st.builds(DeletionTime, timestamps, seconds)


@st.composite
def liveness_infos(draw: st.DrawFn) -> LivenessInfo:
    timestamp_us = draw(timestamps)
    kind = draw(st.sampled_from(["plain", "expiring", "expired"]))
    if kind == "plain":
        return LivenessInfo(timestamp_us)
    if kind == "expired":
        return LivenessInfo(timestamp_us, EXPIRED_LIVENESS_TTL_S, draw(seconds))
    ttl_s = draw(st.integers(1, 10))
    return LivenessInfo(timestamp_us, ttl_s, draw(seconds) + ttl_s)


@st.composite
def complex_columns(draw: st.DrawFn) -> ComplexColumn:
    chosen = draw(st.lists(paths, unique=True, max_size=3))
    elements = tuple(draw(cells(path)) for path in sorted(chosen))
    return ComplexColumn(elements, draw(st.none() | deletions))


@st.composite
def rows(draw: st.DrawFn, clustering: tuple[bytes, ...] = (b"k",)) -> Row:
    data: dict[str, Cell | ComplexColumn] = {}
    for name in SIMPLE_COLUMNS:
        if draw(st.booleans()):
            data[name] = draw(cells())
    if draw(st.booleans()):
        data[COMPLEX_COLUMN] = draw(complex_columns())
    liveness = draw(st.none() | liveness_infos())
    return Row(clustering, liveness, draw(st.none() | deletions), data)


clusterings = st.sampled_from([(b"\x01",), (b"\x02",), (b"\x80",)])
bounds = st.builds(
    ClusteringBound, st.sampled_from([(), (b"\x01",), (b"\x02",), (b"\x80",)]), st.booleans()
)


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    chosen = draw(st.lists(clusterings, max_size=3))
    return Mutation(
        "ks",
        "t",
        (b"pk",),
        draw(st.none() | deletions),
        draw(st.none() | rows(())),
        tuple(draw(rows(clustering)) for clustering in chosen),
        tuple(draw(st.lists(st.builds(RangeTombstone, bounds, bounds, deletions), max_size=2))),
    )


# --- the model: replay writes in timestamp order, last one wins -------------------------------


def cell_order(cell: Cell) -> tuple[int, bool, bool, int, bytes, int]:
    """§6.1 as a sort key: timestamp, then has-a-deletion-time, tombstone, ldt, value, -ttl."""
    has_ldt = cell.local_deletion_time_s != NO_DELETION_TIME
    return (
        cell.timestamp_us,
        has_ldt,
        has_ldt and cell.is_tombstone,
        cell.local_deletion_time_s,
        cell.value,
        -cell.ttl_s,
    )


def liveness_order(info: LivenessInfo) -> tuple[int, bool, bool, int, int]:
    expired = info.ttl_s == EXPIRED_LIVENESS_TTL_S
    return (info.timestamp_us, expired, info.is_expiring, info.local_expiration_time_s, -info.ttl_s)


def replay(writes: Sequence[Cell]) -> Cell:
    """Apply writes in timestamp order (ties broken by §6.1), each overwriting the last."""
    current = None
    for cell in sorted(writes, key=cell_order):
        current = cell
    assert current is not None
    return current


def newest(deletions: Sequence[DeletionTime | None]) -> int | None:
    present = [d.marked_for_delete_at_us for d in deletions if d is not None]
    return max(present) if present else None


def shadowed(deleted_at: int | None, timestamp_us: int) -> bool:
    return deleted_at is not None and timestamp_us <= deleted_at


def model_view(writes: Sequence[Row], now_s: int) -> tuple[bool, dict[str, object]]:
    """(row exists, live cells) of a row after all ``writes``, computed without merging."""
    row_deleted_at = newest([w.deletion for w in writes])
    view: dict[str, object] = {}
    for name in SIMPLE_COLUMNS:
        written = [w.cells[name] for w in writes if name in w.cells]
        winner = replay([cell for cell in written if isinstance(cell, Cell)]) if written else None
        if winner and not shadowed(row_deleted_at, winner.timestamp_us) and winner.is_live(now_s):
            view[name] = winner
    elements = model_collection(
        [w.cells.get(COMPLEX_COLUMN) for w in writes], row_deleted_at, now_s
    )
    if elements:
        view[COMPLEX_COLUMN] = elements
    markers = [w.liveness for w in writes if w.liveness is not None]
    marker = max(markers, key=liveness_order) if markers else None
    marker_live = (
        marker is not None
        and marker.ttl_s != EXPIRED_LIVENESS_TTL_S
        and marker.is_live(now_s)
        and not shadowed(row_deleted_at, marker.timestamp_us)
    )
    return marker_live or bool(view), view


def model_collection(
    written: Sequence[object], row_deleted_at: int | None, now_s: int
) -> list[Cell]:
    """Live elements: per path the replay winner, unless a row or collection deletion covers it."""
    collections = [c for c in written if isinstance(c, ComplexColumn)]
    deleted_at = newest([c.deletion for c in collections])
    if row_deleted_at is not None:
        deleted_at = max(deleted_at if deleted_at is not None else row_deleted_at, row_deleted_at)
    elements: list[Cell] = []
    for path in sorted({e.path or b"" for c in collections for e in c.cells}):
        winner = replay([e for c in collections for e in c.cells if e.path == path])
        if not shadowed(deleted_at, winner.timestamp_us) and winner.is_live(now_s):
            elements.append(winner)
    return elements


def merge_all(writes: Sequence[Row]) -> Row:
    return functools.reduce(merge_rows, writes)


# --- properties -------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(cells(), cells(), cells())
def test_reconcile_cells_is_a_commutative_associative_choice(a: Cell, b: Cell, c: Cell) -> None:
    assert reconcile_cells(a, b) == reconcile_cells(b, a)
    assert reconcile_cells(reconcile_cells(a, b), c) == reconcile_cells(a, reconcile_cells(b, c))
    assert reconcile_cells(a, a) == a
    assert reconcile_cells(a, b) in (a, b)


@PROPERTY_SETTINGS
@given(st.lists(cells(), min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_reconcile_cells_equals_timestamp_order_replay(
    writes: list[Cell], rnd: random.Random
) -> None:
    shuffled = list(writes)
    rnd.shuffle(shuffled)
    assert functools.reduce(reconcile_cells, shuffled) == replay(writes)


@PROPERTY_SETTINGS
@given(rows(), rows(), rows())
def test_merge_rows_commutative_associative_idempotent(a: Row, b: Row, c: Row) -> None:
    ab = merge_rows(a, b)
    assert ab == merge_rows(b, a)
    assert merge_rows(ab, c) == merge_rows(a, merge_rows(b, c))
    assert merge_rows(ab, ab) == ab
    assert merge_rows(ab, a) == ab


@PROPERTY_SETTINGS
@given(st.lists(rows(), min_size=1, max_size=5), seconds, st.randoms(use_true_random=False))
def test_merged_rows_read_like_the_replay_model(
    writes: list[Row], now_s: int, rnd: random.Random
) -> None:
    shuffled = list(writes)
    rnd.shuffle(shuffled)
    merged = merge_all(shuffled)
    exists, view = model_view(writes, now_s)
    assert live_cells(merged, now_s) == view
    assert is_row_live(merged, now_s) == exists


@PROPERTY_SETTINGS
@given(st.lists(rows(), min_size=1, max_size=4), seconds, st.integers(0, 30))
def test_expiry_and_purge_do_not_change_what_a_merged_row_reads(
    writes: list[Row], now_s: int, grace_s: int
) -> None:
    merged = merge_all(writes)
    expired = expire_row(merged, now_s)
    assert expire_row(expired, now_s) == expired
    assert live_cells(expired, now_s) == live_cells(merged, now_s)
    assert is_row_live(expired, now_s) == is_row_live(merged, now_s)
    purged = purge_row(expired, now_s - grace_s)
    assert live_cells(purged, now_s) == live_cells(merged, now_s)
    assert is_row_live(purged, now_s) == is_row_live(merged, now_s)


@PROPERTY_SETTINGS
@given(mutations(), mutations(), mutations())
def test_merge_mutations_commutative_associative_idempotent(
    a: Mutation, b: Mutation, c: Mutation
) -> None:
    ab = merge_mutations(a, b)
    assert ab == merge_mutations(b, a)
    assert merge_mutations(ab, c) == merge_mutations(a, merge_mutations(b, c))
    assert merge_mutations(ab, ab) == ab


def compare_bytes(a: tuple[bytes, ...], b: tuple[bytes, ...]) -> int:
    return (a > b) - (a < b)


def covers(tombstone: RangeTombstone, clustering: tuple[bytes, ...]) -> bool:
    """Single-component coverage, written as interval membership."""
    key = clustering[0]
    start, end = tombstone.start, tombstone.end
    above = (
        not start.prefix or key > start.prefix[0] or (key == start.prefix[0] and start.inclusive)
    )
    below = not end.prefix or key < end.prefix[0] or (key == end.prefix[0] and end.inclusive)
    return above and below


@PROPERTY_SETTINGS
@given(st.lists(mutations(), min_size=1, max_size=3), seconds)
def test_shadowed_partition_reads_like_the_model(updates: list[Mutation], now_s: int) -> None:
    empty = Mutation("ks", "t", (b"pk",))
    merged = shadow_mutation(functools.reduce(merge_mutations, updates, empty), compare_bytes)
    tombstones = [t for u in updates for t in u.range_tombstones]
    partition = [u.partition_deletion for u in updates]
    for clustering in [(b"\x01",), (b"\x02",), (b"\x80",)]:
        writes = [r for u in updates for r in u.rows if r.clustering == clustering]
        covering = [t.deletion for t in tombstones if covers(t, clustering)]
        assert covering_deletions(clustering, tombstones, compare_bytes) == covering
        outer = newest([*partition, *covering])
        if outer is not None:
            writes.append(Row(clustering, None, DeletionTime(outer, 0), {}))
        found = [r for r in merged.rows if r.clustering == clustering]
        exists, view = model_view(writes, now_s) if writes else (False, {})
        assert (is_row_live(found[0], now_s) if found else False) == exists
        assert (live_cells(found[0], now_s) if found else {}) == view
