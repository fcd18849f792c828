"""The hub sink's grouped requests (issue 14 §5) leave exactly what one statement per change
leaves, and what ``materialize`` computes: values, write times, TTLs and the tombstones that
keep older writes out.

Generated change sets (``_generated``: equal timestamps, late older writes, overlapping row,
range and partition deletes, static rows, sets and maps, TTLs run out and still running), a
fifth replayed and all shuffled, so deletes often arrive before the older writes they shadow
(a lost tombstone would let them back). Each set goes through every ``grouping`` (none,
partition, replica) in small rounds and batches, to a standalone hub node and to the 3-node
cluster of the session with an RF 1 keyspace (partitions on different nodes, so ``replica``
packs per node and every batch is coordinated by its replica); the grouped tables are then
replayed in another order and must not move. Non-frozen lists are left out: their replay is an
approximation on every path (``_hub_cql``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from cassandra.cluster import Cluster, Session
from cassandra.query import dict_factory

from ringflow.cdc import CdcOperation
from ringflow.cli._demo_cluster import DEFAULT_PORT, LocalCluster, NodeProcess
from ringflow.pipeline import Change, apply_to_hub, hub_options, materialize
from ringflow.pipeline._changes import RANGE_END_OPERATIONS, RANGE_START_OPERATIONS
from ringflow.pipeline._materialize import canonical_value
from ringflow.schema import Table, timeuuid_from_micros

from ._generated import KV, ChangeGenerator
from ._workload import T0, TABLE

KEYSPACE = "hub_grouping"
GROUPINGS = ("none", "partition", "replica")
RANGE_OPERATIONS = RANGE_START_OPERATIONS | RANGE_END_OPERATIONS
_INCLUSIVE = {
    CdcOperation.RANGE_DELETE_START_EXCLUSIVE: CdcOperation.RANGE_DELETE_START_INCLUSIVE,
    CdcOperation.RANGE_DELETE_END_EXCLUSIVE: CdcOperation.RANGE_DELETE_END_INCLUSIVE,
}
LONG_TTL_S = 900
DDL = {
    "items": (
        "CREATE TABLE {name} (tenant text, bucket int, seq int, tag text, owner text static, "
        "amount bigint, note text, tags set<text>, attrs map<text, int>, hist list<int>, "
        "frozen_l frozen<list<int>>, PRIMARY KEY ((tenant, bucket), seq, tag)) "
        "WITH CLUSTERING ORDER BY (seq ASC, tag DESC)"
    ),
    "kv": "CREATE TABLE {name} (k int PRIMARY KEY, v text, s set<int>)",
}
ATOMIC = {"items": ("owner", "amount", "note", "frozen_l"), "kv": ("v",)}


def _session(address: str, port: int) -> Iterator[Session]:
    cluster = Cluster([address], port=port, protocol_version=4, connect_timeout=10)
    try:
        session = cluster.connect()
        session.row_factory = dict_factory
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        yield session
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module", params=["node", "cluster"])
def target(
    request: pytest.FixtureRequest, hub_node: NodeProcess
) -> Iterator[tuple[str, int, Session]]:
    """(address, port, session) of a standalone hub node or of the 3-node cluster."""
    if request.param == "node":
        address, port = hub_node.address, hub_node.port
    else:
        cluster: LocalCluster = request.getfixturevalue("edge_cluster")
        address, port = cluster.addresses[0], DEFAULT_PORT
    for session in _session(address, port):
        yield address, port, session


def _changes(table: Table, seed: int) -> list[list[Change]]:
    """A generated set moved to 200 s ago, as units (a change, or the two bounds of a range
    delete, which a source emits together), a fifth of them replayed, shuffled. TTLs of 30 s
    have run out; those of 90 s are made 900 s so that none runs out while the test reads (its
    reads compare at one instant). A range bound without clustering values is made inclusive
    (CDC logs an unbounded side so; the exclusive bound of an empty prefix means nothing to
    materialize) and ranges unbounded on both sides are left out (CDC logs a partition
    delete instead); an overwritten collection has no removed elements besides (CQL refuses
    ``s = {...}`` with ``s = s - {...}`` in one statement, so no log row has both)."""
    shift = time.time_ns() // 1000 - 200_000_000 - T0
    units: dict[object, list[Change]] = {}
    for index, change in enumerate(ChangeGenerator(table, seed).workload(300)):
        if "hist" in set(change.values) | change.deleted | set(change.deleted_elements):
            continue
        low = change.time.int & (2**64 - 1)
        ttl = LONG_TTL_S if change.ttl_s == 90 else change.ttl_s
        time_uuid = timeuuid_from_micros(change.time_us + shift, low)
        removed = {n: e for n, e in change.deleted_elements.items() if n not in change.deleted}
        moved = replace(change, time=time_uuid, ttl_s=ttl, deleted_elements=removed)
        if change.operation not in RANGE_OPERATIONS:
            units[index] = [moved]
            continue
        if len(moved.key) == 2:
            moved = replace(moved, operation=_INCLUSIVE.get(moved.operation, moved.operation))
        bounds = units.setdefault(change.time, [])
        if all(b.batch_seq_no != moved.batch_seq_no for b in bounds):
            bounds.append(moved)
    kept = [
        unit
        for unit in units.values()
        if unit[0].operation not in RANGE_OPERATIONS or any(len(b.key) > 2 for b in unit)
    ]
    rng = random.Random(seed)
    mixed = kept + rng.sample(kept, len(kept) // 5)
    rng.shuffle(mixed)
    return [sorted(unit, key=lambda c: c.batch_seq_no) for unit in mixed]


def _flat(units: list[list[Change]]) -> list[Change]:
    return [change for unit in units for change in unit]


def _apply(target: tuple[str, int, Session], table: Table, name: str, grouping: str,
           changes: list[Change]) -> None:  # fmt: skip
    address, port, _ = target
    options = hub_options(
        address, KEYSPACE, name, table, port=port, consistency="ONE", concurrency=4,
        batch_rows=40, grouping=grouping, batch_statements=6, batch_bytes=200,
    )  # fmt: skip
    report = apply_to_hub(options, changes)
    assert report.changes == len(changes)
    if grouping == "none":
        assert report.requests == report.statements
    else:
        assert report.requests < report.statements  # batches were sent


def _read(session: Session, table: Table, name: str) -> dict[tuple[object, ...], Any]:
    """Key -> (values, write times, TTLs) of the atomic columns, as the hub has them."""
    atomic = ATOMIC[table.name]
    keys = [c.name for c in table.primary_key_columns]
    values = [c.name for c in table.columns if not c.is_primary_key and c.name != "hist"]
    extra = [f"WRITETIME({c}) AS wt_{c}, TTL({c}) AS ttl_{c}" for c in atomic]
    rows = session.execute(f"SELECT {', '.join(keys + values + extra)} FROM {KEYSPACE}.{name}")
    state = {}
    for row in rows:
        live = [c for c in values if row[c] is not None]
        state[tuple(row[k] for k in keys)] = (
            {c: canonical_value(table.column(c).type, _plain(row[c])) for c in live},
            {c: row[f"wt_{c}"] for c in atomic if c in live},
            {c: row[f"ttl_{c}"] for c in atomic if c in live and row[f"ttl_{c}"] is not None},
        )
    return state


def _plain(value: object) -> object:
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value
    return list(value)


def _expected(table: Table, changes: list[Change], now_s: int) -> dict[tuple[object, ...], Any]:
    atomic = ATOMIC[table.name]
    return {
        key: (dict(live.values), {c: t for c, t in live.write_times_us.items() if c in atomic})
        for key, live in materialize(table, changes, now_s).items()
    }


def _settled(session: Session, table: Table, name: str, expected: object) -> Any:
    """The hub table once its values and write times equal ``expected``, or as it is after
    5 s (an expired insert is replayed as a marker that expires a second after the write)."""
    deadline = time.monotonic() + 5
    state = _read(session, table, name)
    while _untimed(state) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _read(session, table, name)
    return state


def _untimed(state: dict[tuple[object, ...], Any]) -> dict[tuple[object, ...], Any]:
    return {key: (values, times) for key, (values, times, _) in state.items()}


def _check_ttls(table: Table, changes: list[Change], state: dict[Any, Any], now_s: int) -> None:
    """A cell has a TTL on the hub exactly when materialize has it live now and gone once
    every TTL has run out (a static cell: gone from its partition); its remaining TTL is its
    write second + the TTL - now (± 2 s)."""
    later = _expected(table, changes, now_s + 2 * LONG_TTL_S)
    width = len(table.partition_key_columns)
    statics = {c.name for c in table.static_columns}
    static_later = {
        (key[:width], name) for key, (values, _) in later.items() for name in statics & set(values)
    }
    for key, (values, times, ttls) in state.items():
        live_later = set(later.get(key, ({}, {}))[0]) - statics
        live_later |= {name for name in statics if (key[:width], name) in static_later}
        assert set(ttls) == {c for c in ATOMIC[table.name] if c in values} - live_later, key
        for column, ttl in ttls.items():
            remaining = times[column] // 1_000_000 + LONG_TTL_S - now_s
            assert abs(ttl - remaining) <= 2, (key, column, ttl, remaining)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("table", [TABLE, KV], ids=["items", "kv"])
def test_every_grouping_leaves_the_state_of_one_statement_per_change(
    target: tuple[str, int, Session], table: Table, seed: int
) -> None:
    session = target[2]
    units = _changes(table, seed)
    changes = _flat(units)
    states = {}
    for grouping in GROUPINGS:
        name = f"{table.name}_{seed}_{grouping}"
        session.execute(f"DROP TABLE IF EXISTS {KEYSPACE}.{name}")
        session.execute(DDL[table.name].format(name=f"{KEYSPACE}.{name}"))
        _apply(target, table, name, grouping, changes)
    now_s = int(time.time())
    expected = _expected(table, changes, now_s)
    assert len(expected) >= 5 and any(len(values) > 1 for values, _ in expected.values())
    for grouping in GROUPINGS:
        state = _settled(session, table, f"{table.name}_{seed}_{grouping}", expected)
        assert _untimed(state) == expected, grouping
        _check_ttls(table, changes, state, int(time.time()))
        states[grouping] = state
    assert _untimed(states["replica"]) == _untimed(states["none"])
    assert _untimed(states["partition"]) == _untimed(states["none"])

    # replayed in another order through the grouped paths: nothing moves
    random.Random(seed + 100).shuffle(units)
    for grouping in ("partition", "replica"):
        name = f"{table.name}_{seed}_{grouping}"
        _apply(target, table, name, grouping, _flat(units))
        assert _untimed(_settled(session, table, name, expected)) == expected, grouping
