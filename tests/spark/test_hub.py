"""The hub sink: a node as the hub ends up with the LWW state of the changes, whatever the order,
the replays or the route (batch or stream); bad options fail before any job."""

from __future__ import annotations

import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cassandra.cluster import Cluster, Session
from cassandra.query import dict_factory
from pyspark.sql import SparkSession

from ringflow.cdc import CdcOperation
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.pipeline import (
    STREAM_ID_FIELD,
    Change,
    PipelineConfigError,
    change_schema,
    change_to_row,
    materialize,
    table_to_json,
)
from ringflow.pipeline._hub import HubDataSource, apply_to_hub, hub_options
from ringflow.pipeline._materialize import canonical_value
from ringflow.schema import timeuuid_from_micros

from ._streams import change_stream, run_to_end, write_change_files
from ._workload import T0, TABLE, workload

KEYSPACE = "hub"
TARGET = "items_copy"
COLUMNS = ["owner", "amount", "note", "tags", "attrs", "hist", "frozen_l"]
ATOMIC = ["owner", "amount", "note", "frozen_l"]
DDL = (
    f"CREATE TABLE {KEYSPACE}.{{name}} (tenant text, bucket int, seq int, tag text, "
    "owner text static, amount bigint, note text, tags set<text>, attrs map<text, int>, "
    "hist list<int>, frozen_l frozen<list<int>>, PRIMARY KEY ((tenant, bucket), seq, tag)) "
    "WITH CLUSTERING ORDER BY (seq ASC, tag DESC)"
)


@pytest.fixture(scope="module")
def hub() -> Iterator[tuple[NodeProcess, Session]]:
    base = Path(tempfile.mkdtemp(prefix="ringflow-hub-"))
    node = NodeProcess(base / "data", random_loopback_address())
    cluster: Cluster | None = None
    try:
        node.start()
        cluster = Cluster([node.address], port=node.port, protocol_version=4, connect_timeout=10)
        session = cluster.connect()
        session.row_factory = dict_factory
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        yield node, session
    finally:
        if cluster is not None:
            cluster.shutdown()
        node.kill()


@pytest.fixture(scope="module")
def hub_spark(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(HubDataSource)
    return spark


def _recent_workload() -> list[Change]:
    """The shared workload moved to a minute ago (so TTLs of 50 s and 30 s have run out and
    TTLs of 1000 s have not), without its non-frozen list changes (not replayable: _hub_cql)."""
    shift = time.time_ns() // 1000 - 60_000_000 - T0
    moved = []
    for change in workload():
        if "hist" in set(change.values) | set(change.deleted_elements):
            continue
        low = change.time.int & (2**64 - 1)
        moved.append(replace(change, time=timeuuid_from_micros(change.time_us + shift, low)))
    return moved


def _units(changes: list[Change]) -> list[list[Change]]:
    """Changes grouped so that the two bounds of a range delete stay together."""
    units: dict[tuple[uuid.UUID, int] | int, list[Change]] = {}
    for index, change in enumerate(changes):
        ranged = change.operation.value in range(5, 9)
        units.setdefault((change.time, 0) if ranged else index, []).append(change)
    return list(units.values())


def _table(session: Session, name: str) -> None:
    session.execute(f"DROP TABLE IF EXISTS {KEYSPACE}.{name}")
    session.execute(DDL.format(name=name))


def _read_hub(session: Session, name: str) -> dict[tuple[object, ...], Any]:
    times = ", ".join(f"WRITETIME({c}) AS wt_{c}" for c in ATOMIC)
    keys = [c.name for c in TABLE.primary_key_columns]
    rows = session.execute(f"SELECT {', '.join(keys + COLUMNS)}, {times} FROM {KEYSPACE}.{name}")
    result = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        values = {
            c: canonical_value(TABLE.column(c).type, _plain(row[c]))
            for c in COLUMNS
            if row[c] is not None
        }
        result[key] = (values, {c: row[f"wt_{c}"] for c in ATOMIC if row[c] is not None})
    return result


def _settled_hub(session: Session, name: str, expected: object) -> dict[tuple[object, ...], Any]:
    """The hub table once it equals ``expected``, or as it is after 5 s. An expired insert is
    replayed with a marker that expires a second later, so the hub may show that row for up to
    a second after the write; what it converges to is what the tests compare."""
    deadline = time.monotonic() + 5
    state = _read_hub(session, name)
    while state != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _read_hub(session, name)
    return state


def _plain(value: object) -> object:
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value
    return list(value)


def _expected(changes: list[Change]) -> dict[tuple[object, ...], Any]:
    rows = materialize(TABLE, changes, int(time.time()))
    return {
        key: (dict(live.values), {n: t for n, t in live.write_times_us.items() if n in ATOMIC})
        for key, live in rows.items()
    }


def _options(node: NodeProcess, name: str) -> dict[str, str]:
    return hub_options(
        node.address, KEYSPACE, name, TABLE, consistency="ONE", concurrency=8, batch_rows=7
    )


def test_stream_then_shuffled_replays_leave_the_lww_state(
    hub_spark: SparkSession, hub: tuple[NodeProcess, Session], tmp_path: Path
) -> None:
    node, session = hub
    _table(session, "stream_t")
    changes = _recent_workload()
    units = _units(changes)
    random.Random(3).shuffle(units)
    batches = [[c for unit in units[i::3] for c in unit] for i in range(3)]
    write_change_files(tmp_path / "in", TABLE, batches)
    options = _options(node, "stream_t")
    stream = change_stream(hub_spark, tmp_path / "in", TABLE)
    run_to_end(stream, "ringflow-hub", options, tmp_path / "ckpt")
    expected = _expected(changes)
    assert any(len(values) > 3 for values, _ in expected.values())
    state = _settled_hub(session, "stream_t", expected)
    assert state == expected

    # the same changes again, shuffled with duplicates, as a batch write: nothing changes
    rng = random.Random(5)
    again = changes + rng.sample(changes, len(changes) // 2)
    rng.shuffle(again)
    frame = hub_spark.createDataFrame(
        [change_to_row(TABLE, c) for c in again], change_schema(TABLE)
    ).repartition(2, STREAM_ID_FIELD)
    frame.write.format("ringflow-hub").options(**options).mode("append").save()
    assert _settled_hub(session, "stream_t", state) == state


def test_applying_in_any_order_without_spark_gives_the_same_state(
    hub: tuple[NodeProcess, Session],
) -> None:
    node, session = hub
    changes = _recent_workload()
    for seed in (1, 2):
        name = f"plain_{seed}"
        _table(session, name)
        units = _units(changes)
        random.Random(seed).shuffle(units)
        report = apply_to_hub(_options(node, name), [c for unit in units for c in unit])
        assert report.changes == len(changes) and report.statements > 0
        expected = _expected(changes)
        assert _settled_hub(session, name, expected) == expected


def test_list_appends_and_overwrites_replay_once(hub: tuple[NodeProcess, Session]) -> None:
    node, session = hub
    _table(session, "lists")
    now = time.time_ns() // 1000
    key = {"tenant": "l", "bucket": 1, "seq": 1, "tag": "a"}

    def at(offset: int, values: dict[str, object], deleted: frozenset[str]) -> Change:
        stamp = timeuuid_from_micros(now + offset, offset + 1)
        return Change("shop", "items", CdcOperation.UPDATE, stamp, key, 0, values, deleted)

    paths = [timeuuid_from_micros(now + 10 + i, 9) for i in range(3)]
    changes = [
        at(0, {"hist": {paths[0]: 1}}, frozenset({"hist"})),
        at(10, {"hist": {paths[2]: 3, paths[1]: 2}}, frozenset()),
    ]
    apply_to_hub(_options(node, "lists"), changes)
    assert _read_hub(session, "lists")[("l", 1, 1, "a")][0] == {"hist": [1, 2, 3]}


def test_bad_options_fail_before_any_job(
    hub_spark: SparkSession, hub: tuple[NodeProcess, Session]
) -> None:
    node, session = hub
    _table(session, "opts")
    good = {"contact_points": node.address, "keyspace": KEYSPACE, "table": "opts"}
    schema = table_to_json(TABLE)
    with pytest.raises(PipelineConfigError, match="unknown keyspace"):
        hub_options(node.address, "nope", "opts", TABLE, consistency="ONE")
    with pytest.raises(PipelineConfigError, match="unknown table"):
        hub_options(node.address, KEYSPACE, "nope", TABLE, consistency="ONE")
    with pytest.raises(PipelineConfigError, match="cannot connect"):
        hub_options("127.0.0.1", KEYSPACE, "opts", TABLE, port=1)
    with pytest.raises(PipelineConfigError, match="concurrency"):
        hub_options(node.address, KEYSPACE, "opts", TABLE, concurrency=0)
    with pytest.raises(PipelineConfigError, match="consistency"):
        hub_options(node.address, KEYSPACE, "opts", TABLE, consistency="MOST")
    with pytest.raises(PipelineConfigError, match="grouping"):
        hub_options(node.address, KEYSPACE, "opts", TABLE, grouping="token")
    for limit in ("batch_statements", "batch_bytes"):
        with pytest.raises(PipelineConfigError, match=limit):
            hub_options(node.address, KEYSPACE, "opts", TABLE, **{limit: 0})
    session.execute(f"CREATE TABLE {KEYSPACE}.other (tenant text PRIMARY KEY, amount bigint)")
    with pytest.raises(PipelineConfigError, match="differs"):
        hub_options(node.address, KEYSPACE, "other", TABLE, consistency="ONE")
    frame = hub_spark.createDataFrame([], change_schema(TABLE))
    for options, message in [
        ({**good, "schema": schema, "colour": "red"}, "unknown option"),
        ({**good, "schema": schema, "port": "99999"}, "port"),
        ({**good}, "schema"),
        ({**good, "schema": schema, "keyspace": "nope"}, "unknown keyspace"),
    ]:
        with pytest.raises(Exception, match=message):
            frame.write.format("ringflow-hub").options(**options).mode("append").save()


def test_an_expired_insert_does_not_leave_an_older_row_alive(
    hub: tuple[NodeProcess, Session],
) -> None:
    """An insert whose TTL ran out before replication shadows an older live insert of the same
    row (same columns) on the hub, as its expired marker and cells do on the source: the row is
    gone, not left as a row of nulls kept alive by the older marker."""
    node, session = hub
    _table(session, "expired")
    now = time.time_ns() // 1000
    key = {"tenant": "e", "bucket": 1, "seq": 1, "tag": "a"}
    older = Change(
        "shop", "items", CdcOperation.INSERT, timeuuid_from_micros(now - 60_000_000, 1), key,
        values={"amount": 1},
    )  # fmt: skip
    expired = Change(
        "shop", "items", CdcOperation.INSERT, timeuuid_from_micros(now - 30_000_000, 2), key,
        values={"amount": 2}, ttl_s=5,
    )  # fmt: skip
    apply_to_hub(_options(node, "expired"), [older, expired])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ("e", 1, 1, "a") in _read_hub(session, "expired"):
        time.sleep(0.2)
    assert ("e", 1, 1, "a") not in _read_hub(session, "expired")
    assert materialize(TABLE, [older, expired], int(time.time())) == {}
