"""The log builder's contract beyond row contents (scylla-cdc.md §5 "cdc$time", "Name and
properties": per-cell TTL; §9 item 7: end_of_batch and batch_seq_no).

Proves: ``cdc$time`` is the bucket's timestamp with the capture's low bits; every log cell has
the bucket's timestamp and the cdc ``ttl`` (none when 0) and rows carry no row marker (Scylla's
``log_mutation_builder`` writes cells only); numbering and ``cdc$end_of_batch`` per bucket; the
same input always gives the same bytes; malformed input raises InvalidRequest; the image helpers
agree with the builder's post-images.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc._log_images import apply_delta_to_image, row_image
from ringflow.cdc._log_rows import CdcCapture, build_log_mutations
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    INT,
    Cell,
    ComplexColumn,
    MapType,
    Mutation,
    PreimageMode,
    Row,
    timeuuid_from_micros,
)
from ringflow.schema._codec import deserialize, serialize
from tests.unit.cdc.test_log_rows_support import (
    CAPTURE,
    NOW_S,
    STREAM,
    T,
    bound,
    build,
    cdc,
    collections_table,
    dead,
    decode,
    elements,
    i,
    live,
    map_cells,
    marker,
    mutation,
    overwrite,
    range_delete,
    row,
    table,
    tombstone,
    txt,
)

BASIC = table("t")
MAP = MapType(INT, INT)
IMAGES = table("im", regular=[("v1", INT), ("v2", MAP)], options=cdc(PreimageMode.FULL, True))


def _cells(log_mutation: Mutation) -> list[Cell]:
    cells = []
    for log_row in log_mutation.rows:
        assert log_row.liveness is None and log_row.deletion is None
        for cell in log_row.cells.values():
            assert isinstance(cell, Cell)
            cells.append(cell)
    return cells


def test_cdc_time_and_cells_carry_the_bucket_timestamp_and_the_cdc_ttl() -> None:
    """Each bucket: partition (stream,), cdc$time = timeuuid(ts, low bits), cells at ts with
    TTL = cdc ttl expiring at now + ttl; a collection tombstone alone is logged at its ts + 1."""
    base_mutation = mutation(
        BASIC,
        [row((0,), {"v1": live(i(0), T + 5)})],
        ranges=[range_delete(bound((1,)), bound((2,)), T - 3)],
    )
    log = cdc_log_table(BASIC)
    mutations = build_log_mutations(BASIC, log, base_mutation, CAPTURE, NOW_S)
    assert [m.partition_key for m in mutations] == [(STREAM,), (STREAM,)]
    for log_mutation, ts in zip(mutations, (T - 3, T + 5), strict=True):
        time = timeuuid_from_micros(ts, CAPTURE.timeuuid_low_bits).bytes
        assert {log_row.clustering[0] for log_row in log_mutation.rows} == {time}
        assert {(c.timestamp_us, c.ttl_s) for c in _cells(log_mutation)} == {(ts, 86400)}
        assert {c.local_deletion_time_s for c in _cells(log_mutation)} == {NOW_S + 86400}
    collections = collections_table()
    column_delete = mutation(collections, [row((0,), {"m": elements(deletion=tombstone(T))})])
    [log_mutation] = build(collections, column_delete).mutations
    assert {cell.timestamp_us for cell in _cells(log_mutation)} == {T + 1}


def test_ttl_zero_writes_cells_that_never_expire() -> None:
    """``ttl: 0`` = no TTL on the log cells."""
    forever = table("f", options=cdc(ttl_s=0))
    [log_mutation] = build(forever, mutation(forever, [row((0,), {"v1": live(i(0))})])).mutations
    assert all(
        not cell.is_expiring and cell.is_live(NOW_S + 10**9) for cell in _cells(log_mutation)
    )


def test_same_input_same_bytes_whatever_the_row_order() -> None:
    """Replicas build byte-identical log mutations; input row order does not matter."""
    rows = [row((n,), {"v1": live(i(n), T + n % 2)}, marker() if n % 3 else None) for n in range(6)]
    first = build(BASIC, mutation(BASIC, rows)).mutations
    assert first == build(BASIC, mutation(BASIC, list(reversed(rows)))).mutations
    assert first == build(BASIC, mutation(BASIC, rows)).mutations


def test_changeless_input_gives_no_log_mutation() -> None:
    """An empty mutation, an empty row or an empty collection change produces nothing."""
    collections = collections_table()
    assert build(BASIC, mutation(BASIC)).mutations == []
    assert build(BASIC, mutation(BASIC, [row((0,))])).mutations == []
    empty_collection = mutation(collections, [row((0,), {"m": ComplexColumn()})])
    assert build(collections, empty_collection).mutations == []


def _bad(**changes: Any) -> Mutation:
    return replace(mutation(BASIC, [row((0,), {"v1": live(i(0))})]), **changes)


@pytest.mark.parametrize(
    ("what", "bad_mutation", "message"),
    [
        ("another table", _bad(table="other"), "mutation is for ks.other"),
        ("partition key length", _bad(partition_key=(i(0), i(1))), "partition key"),
        ("unknown column", _bad(rows=(row((0,), {"zz": live(i(0))}),)), "unknown column"),
        ("clustering length", _bad(rows=(row((0, 1), {"v1": live(i(0))}),)), "clustering"),
        (
            "duplicate rows",
            _bad(rows=(row((0,)), row((0,), {"v1": dead()}), row((0,), {"v2": dead()}))),
            "share",
        ),
        ("collection data on an int", _bad(rows=(row((0,), {"v1": map_cells({1: 1})}),)), "atomic"),
        ("static row marker", _bad(static_row=Row((), marker(), None, {})), "static row"),
        (
            "range on a prefix too long",
            _bad(range_tombstones=(range_delete(bound((0, 1)), bound()),)),
            "longer",
        ),
    ],
)
def test_malformed_mutations_are_refused(what: str, bad_mutation: Mutation, message: str) -> None:
    """Input no coordinator builds is an InvalidRequest naming the rule, not a wrong log."""
    del what
    with pytest.raises(InvalidRequest, match=message):
        build(BASIC, bad_mutation)


def test_wrong_tables_and_captures_are_refused() -> None:
    base_mutation = mutation(BASIC, [row((0,), {"v1": live(i(0))})])
    other_log = cdc_log_table(table("other"))
    with pytest.raises(InvalidRequest, match="is not the CDC log"):
        build_log_mutations(BASIC, other_log, base_mutation, CAPTURE, NOW_S)
    disabled = table("d", options=replace(cdc(), cdc=replace(cdc().cdc, enabled=False)))
    with pytest.raises(InvalidRequest, match="not enabled"):
        build(disabled, mutation(disabled, [row((0,), {"v1": live(i(0))})]))
    with pytest.raises(InvalidRequest, match="16 bytes"):
        CdcCapture(b"short", 0)
    with pytest.raises(InvalidRequest, match="64-bit"):
        CdcCapture(STREAM, -1)


def test_row_image_reads_like_cql() -> None:
    """Live, unshadowed values only; lists keyed by timeuuid; a marker alone keeps a row."""
    collections = collections_table()
    stored = Row(
        (i(0),),
        marker(T - 10),
        None,
        {
            "m": ComplexColumn(
                (
                    live(txt("a"), T - 20, path=i(1)),
                    live(txt("b"), path=i(2)),
                ),
                tombstone(T - 15),
            ),
            "st": elements(live(b"", ttl_s=5, path=i(3))),
            "fm": dead(),
        },
    )
    image = row_image(collections, stored, NOW_S)
    assert image is not None
    assert set(image) == {"m", "st"}
    assert deserialize(cdc_log_table(collections).column("m").type, image["m"]) == {2: "b"}
    assert row_image(collections, stored, NOW_S + 5) is not None  # marker keeps the row
    expired = replace(stored, liveness=marker(T - 10, ttl_s=5), cells={"fm": dead()})
    assert row_image(collections, expired, NOW_S + 5) is None
    shadowed = replace(stored, deletion=tombstone(T))
    assert row_image(collections, shadowed, NOW_S) is None


def test_apply_delta_to_image_equals_the_builders_post_image() -> None:
    """The helper and the builder's post-image agree, for a split, TTL'd collection write."""
    before = {"v1": i(3), "v2": serialize(MapType(INT, INT, True), {1: 1, 5: 5})}
    written = row(
        (0,),
        {"v2": overwrite([live(i(2), ttl_s=5, path=i(2))]), "v1": dead(T + 1)},
        marker(),
    )
    after = apply_delta_to_image(IMAGES, before, written, NOW_S)
    built = build(IMAGES, mutation(IMAGES, [written]), preimage={(i(0),): before})
    last_post = [r for r in built.rows if r["op"] == 9][-1]
    assert after == {"v2": serialize(MapType(INT, INT, True), {2: 2})}
    assert last_post == {
        "ts": T + 1,
        "seq": 2,
        "pk": 0,
        "op": 9,
        "ck": 0,
        "v2": {2: 2},
        "eob": True,
    }
    assert apply_delta_to_image(IMAGES, before, row((0,), deletion=tombstone(T)), NOW_S) is None


# --- a property over random single-column writes ---------------------------------------------

_cell = st.builds(
    lambda value, ts, ttl, alive: live(i(value), T + ts, ttl) if alive else dead(T + ts),
    st.integers(-3, 3),
    st.integers(0, 2),
    st.sampled_from([0, 5]),
    st.booleans(),
)
_row = st.builds(
    lambda ck, v1, v2, insert: row(
        (ck,), {k: c for k, c in (("v1", v1), ("v2", v2)) if c}, marker() if insert else None
    ),
    st.integers(0, 4),
    st.none() | _cell,
    st.none() | _cell,
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, max_size=5, unique_by=lambda r: r.clustering))
def test_every_written_cell_is_logged_once_in_its_bucket(rows: list[Row]) -> None:
    """Buckets by increasing timestamp, numbered 0..n-1 with end_of_batch on the last row only;
    each live cell shows up as its value and each dead cell as cdc$deleted_X, at its timestamp,
    in a delta row of its clustering key with its TTL."""
    built = build(BASIC, mutation(BASIC, rows))
    stamps = [decode(cdc_log_table(BASIC), [m])[0]["ts"] for m in built.mutations]
    assert stamps == sorted(set(stamps))
    for log_mutation in built.mutations:
        decoded = decode(cdc_log_table(BASIC), [log_mutation])
        assert [r["seq"] for r in decoded] == list(range(len(decoded)))
        assert [r.get("eob", False) for r in decoded] == [False] * (len(decoded) - 1) + [True]
    logged = [
        (r["ts"], r["ck"], name.removeprefix("del_"), r.get(name), r.get("ttl"))
        for r in built.rows
        for name in ("v1", "v2", "del_v1", "del_v2")
        if name in r
    ]
    written = [
        (
            c.timestamp_us,
            deserialize(INT, r.clustering[0]),
            n,
            None if c.is_tombstone else deserialize(INT, c.value),
            c.ttl_s or None,
        )
        for r in rows
        for n, c in r.cells.items()
        if isinstance(c, Cell)
    ]
    normal = [(ts, ck, n, True if v is None else v, ttl) for ts, ck, n, v, ttl in written]
    assert sorted(logged, key=repr) == sorted(normal, key=repr)
