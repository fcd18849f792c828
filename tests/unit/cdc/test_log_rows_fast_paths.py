"""The log builder's shortcuts give exactly what its general path gives; its caches never serve
an altered table's plan.

Shortcuts (performance only): ``normalize_mutation`` returns an already canonical mutation as
is, ``split_changes`` builds the one bucket of a single-timestamp upsert directly, and
``build_log_mutations`` writes the one delta row of a one-row, one-change upsert without images
directly. Each is compared with the general path it skips (``_normalized``, ``_split``,
``_build``) over random writes, valid or not (same result, or same error). The per-table plans
are cached by ``Table`` identity: an ALTER gives a new ``Table`` object, hence a new plan.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cdc._log_input import _normalized, normalize_mutation
from ringflow.cdc._log_rows import _build, _single_row_delta, build_log_mutations
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.cdc._log_split import _split, split_changes
from ringflow.cdc._log_values import (
    IdentityCache,
    base_plan,
    bigint,
    clustering_key,
    int32,
    timeuuid_bytes,
    tinyint,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    INT,
    TINYINT,
    Cell,
    ColumnData,
    DeltaMode,
    InvalidValue,
    Mutation,
    Row,
    Table,
    TableOptions,
    timeuuid_from_micros,
)
from ringflow.schema._codec import serialize
from tests.unit.cdc.test_log_rows_support import (
    CAPTURE,
    NOW_S,
    T,
    cdc,
    collections_table,
    dead,
    decode,
    i,
    live,
    map_cells,
    marker,
    mutation,
    table,
    tombstone,
)

_TABLES = {
    "delta": table("fast", clustering=("c1", "c2")),
    "keys": table("fast_keys", options=cdc(delta=DeltaMode.KEYS)),
    "no_ttl": table("fast_no_ttl", clustering=(), options=cdc(ttl_s=0)),
    "static": table("fast_static", static=[("s", INT)]),
    "collections": collections_table(),
}
_NAMES = ("v1", "v2", "v1", "v2", "m", "s", "nope")  # mostly valid


def _outcome(call: Callable[[], object]) -> object:
    """What ``call`` returns, or the type and message of what it raises."""
    try:
        return call()
    except InvalidRequest as error:
        return (type(error).__name__, str(error))


@st.composite
def _cells(draw: st.DrawFn) -> Cell:
    ts = T + draw(st.sampled_from([0, 0, 0, 0, 0, 1]))
    kind = draw(st.sampled_from(["live", "live", "live", "expiring", "dead"]))
    if kind == "dead":
        return dead(ts)
    return live(i(draw(st.integers(-2, 2))), ts, 5 if kind == "expiring" else 0)


@st.composite
def _rows(draw: st.DrawFn, base: Table) -> Row:
    arity = len(base.clustering_columns)
    arity += draw(st.sampled_from([0, 0, 0, 0, 0, 0, 0, 0, 1, -1])) if arity else 0
    clustering = tuple(i(draw(st.integers(0, 2))) for _ in range(max(arity, 0)))
    names = draw(st.lists(st.sampled_from(_NAMES), max_size=3, unique=True))
    cells: dict[str, ColumnData] = {name: draw(_cells()) for name in names}
    if "m" in cells and draw(st.booleans()):
        cells["m"] = map_cells({1: 1})  # a collection written as elements
    liveness = None
    if draw(st.booleans()):
        ts = T + draw(st.sampled_from([0, 0, 0, 1]))
        liveness = marker(ts, draw(st.sampled_from([0, 0, 0, 5])))
    deletion = tombstone(T) if draw(st.integers(0, 19)) == 0 else None
    return Row(clustering, liveness, deletion, cells)


@st.composite
def _writes(draw: st.DrawFn) -> tuple[Table, Mutation]:
    base = _TABLES[draw(st.sampled_from(sorted(_TABLES)))]
    count = draw(st.sampled_from([1, 1, 1, 1, 0, 2, 3]))
    rows = draw(st.lists(_rows(base), min_size=count, max_size=count))
    if len(base.clustering_columns) == 0:
        rows = rows[:1]
    partition_deletion = tombstone(T - 1) if draw(st.integers(0, 19)) == 0 else None
    return base, mutation(base, rows, partition_deletion=partition_deletion)


@st.composite
def _plain_writes(draw: st.DrawFn) -> tuple[Table, Mutation]:
    """One-row upserts that mostly share one timestamp and TTL (the shortcuts' domain), and
    near misses (another timestamp or TTL on one element)."""
    base = _TABLES[draw(st.sampled_from(["delta", "keys", "no_ttl"]))]
    ts, ttl = T + draw(st.integers(0, 1)), draw(st.sampled_from([0, 5]))

    def element_key() -> tuple[int, int]:
        return (ts, ttl) if draw(st.integers(0, 9)) else (T + 2, 7)

    cells: dict[str, Cell] = {}
    for name in draw(st.lists(st.sampled_from(["v1", "v2"]), max_size=2, unique=True)):
        cell_ts, cell_ttl = element_key()
        if cell_ttl == 0 and draw(st.booleans()):
            cells[name] = dead(cell_ts)
        else:
            cells[name] = live(i(draw(st.integers(-2, 2))), cell_ts, cell_ttl)
    liveness = marker(*element_key()) if draw(st.booleans()) or not cells else None
    clustering = tuple(i(draw(st.integers(0, 2))) for _ in base.clustering_columns)
    return base, mutation(base, [Row(clustering, liveness, None, cells)])


@settings(max_examples=300, deadline=None)
@given(_writes() | _plain_writes())
def test_shortcuts_equal_the_general_path(write: tuple[Table, Mutation]) -> None:
    base, written = write
    log, plan, key = cdc_log_table(base), base_plan(base), clustering_key(base)
    built = _outcome(lambda: build_log_mutations(base, log, written, CAPTURE, NOW_S))
    general = _outcome(lambda: _build(plan, key, log, written, CAPTURE, NOW_S, None, None))
    assert built == general
    normal = _outcome(lambda: normalize_mutation(base, written, key))
    assert normal == _outcome(lambda: _normalized(base, written, key))
    if isinstance(normal, Mutation):
        assert split_changes(base, normal, key) == _split(base, normal, key)


def test_a_plain_upsert_takes_the_single_row_shortcut() -> None:
    """INSERT and UPDATE of one row at one timestamp and TTL: one delta row, as expected."""
    base = _TABLES["delta"]
    log = cdc_log_table(base)
    clustering = (i(0), i(1))
    insert = mutation(base, [Row(clustering, marker(T, 5), None, {"v2": live(i(2), ttl_s=5)})])
    update = mutation(base, [Row(clustering, None, None, {"v1": dead(), "v2": dead()})])
    for written in (insert, update):
        assert _single_row_delta(base_plan(base), log, written, CAPTURE, NOW_S) is not None
    assert decode(log, build_log_mutations(base, log, insert, CAPTURE, NOW_S)) == [
        {"ts": T, "seq": 0, "op": 2, "pk": 0, "c1": 0, "c2": 1, "v2": 2, "ttl": 5, "eob": True},
    ]
    assert decode(log, build_log_mutations(base, log, update, CAPTURE, NOW_S)) == [
        {"ts": T, "seq": 0, "op": 1, "pk": 0, "c1": 0, "c2": 1, "del_v1": True, "del_v2": True,
         "eob": True},
    ]  # fmt: skip
    cells = {"v2": live(i(2), ttl_s=5), "v1": dead()}  # two TTLs: two changes, split
    two_changes = mutation(base, [Row(clustering, marker(T, 5), None, cells)])
    assert _single_row_delta(base_plan(base), log, two_changes, CAPTURE, NOW_S) is None
    assert len(decode(log, build_log_mutations(base, log, two_changes, CAPTURE, NOW_S))) == 2


def _altered(base: Table, extra: str) -> Table:
    """``ALTER TABLE ... ADD extra int``: a new Table object with the same id."""
    regular = [(c.name, c.type) for c in base.regular_columns] + [(extra, INT)]
    return Table.create(
        base.keyspace,
        base.name,
        [(c.name, c.type) for c in base.partition_key_columns],
        [(c.name, c.type, c.order) for c in base.clustering_columns],
        regular=regular,
        options=base.options,
        table_id=base.id,
    )


def test_an_altered_table_gets_a_new_plan_never_a_stale_one() -> None:
    before = table("altered")
    after = _altered(before, "v3")
    log_before, log_after = cdc_log_table(before), cdc_log_table(after)
    written = mutation(after, [Row((i(0),), None, None, {"v3": live(i(3))})])
    assert base_plan(before) is base_plan(before)
    assert base_plan(after) is not base_plan(before)
    assert "v3" in base_plan(after).regular_names
    assert "v3" not in base_plan(before).regular_names
    rows = decode(log_after, build_log_mutations(after, log_after, written, CAPTURE, NOW_S))
    assert rows[0]["v3"] == 3
    with pytest.raises(InvalidRequest, match="unknown column 'v3'"):
        build_log_mutations(before, log_before, written, CAPTURE, NOW_S)
    with pytest.raises(InvalidRequest, match="has no column 'v3'"):  # the log not altered yet
        build_log_mutations(after, log_before, written, CAPTURE, NOW_S)
    dropped = Table(before.keyspace, before.name, before.columns, before.options, before.id)
    # ... DROP v3 again: equal to ``before``, but another object
    assert dropped == before and base_plan(dropped) is not base_plan(before)
    with pytest.raises(InvalidRequest, match="unknown column 'v3'"):
        build_log_mutations(dropped, cdc_log_table(dropped), written, CAPTURE, NOW_S)


def test_identity_cache_is_bounded_and_keyed_by_identity() -> None:
    built: list[object] = []

    def build(key: object) -> int:
        built.append(key)
        return len(built)

    cache: IdentityCache[object, int] = IdentityCache(build, limit=3)
    keys = [uuid.UUID(int=1), uuid.UUID(int=1), uuid.UUID(int=2)]  # two equal, distinct objects
    assert [cache(key) for key in keys] == [1, 2, 3]
    assert [cache(key) for key in keys] == [1, 2, 3]  # hits, no new builds
    for n in range(10):
        cache(uuid.UUID(int=10 + n))
        assert len(cache) <= 3
    assert cache(keys[0]) == len(built)  # evicted long ago: built again


def test_fixed_size_values_are_the_codec_values() -> None:
    for low, high, pack, cql_type in (
        (-(2**7), 2**7 - 1, tinyint, TINYINT),
        (-(2**31), 2**31 - 1, int32, INT),
        (-(2**63), 2**63 - 1, bigint, BIGINT),
    ):
        for value in (low, -1, 0, 1, high):
            assert pack(value) == serialize(cql_type, value)
        for value in (low - 1, high + 1):
            with pytest.raises(InvalidValue):
                pack(value)
            with pytest.raises(InvalidValue):
                serialize(cql_type, value)
    assert struct.unpack(">b", tinyint(-3)) == (-3,)


@given(st.integers(-(2**55), 2**57), st.integers(0, 2**64 - 1))
def test_timeuuid_bytes_are_the_timeuuid(timestamp_us: int, low_bits: int) -> None:
    try:
        expected: object = timeuuid_from_micros(timestamp_us, low_bits).bytes
    except ValueError as error:
        expected = str(error)
    try:
        found: object = timeuuid_bytes(timestamp_us, low_bits)
    except ValueError as error:
        found = str(error)
    assert found == expected


def test_plans_see_option_changes() -> None:
    """ALTER TABLE ... WITH cdc = {...}: a new Table object, a plan with the new options."""
    before = table("options")
    after = table("options", options=TableOptions(cdc=cdc(ttl_s=0).cdc))
    assert base_plan(before).ttl_s == 86400 and base_plan(after).ttl_s == 0
