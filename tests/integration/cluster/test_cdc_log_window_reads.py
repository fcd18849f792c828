"""CDC log window reads through a 3-node RF=3 cluster of real processes (what ``ringflow-cdc``
runs per stream: ``"cdc$stream_id" = ? AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <=
maxTimeuuid(?)``, prepared, at ONE and QUORUM).

The coordinator reads only the window's clustering slice from the replicas (``READ_REQ`` with
bounds); these tests check the answers are the rows of the window, exactly: every window of a
stream, read through each node, equals the stream's full read cut to the window, and a row
written a moment ago (still in the replicas' unsettled log queue) is in the next window read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cassandra import ConsistencyLevel
from cassandra.concurrent import execute_concurrent_with_args

from tests.integration.cluster.conftest import LocalCluster

pytestmark = pytest.mark.timeout(300)
WINDOW = (
    'SELECT "cdc$time", pk, ck FROM win."t_scylla_cdc_log" WHERE "cdc$stream_id" = ? '
    'AND "cdc$time" > maxTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)'
)
WHOLE = 'SELECT "cdc$time", pk, ck FROM win."t_scylla_cdc_log" WHERE "cdc$stream_id" = ?'


def _ms(value: object) -> datetime:
    """The millisecond of a timeuuid (what maxTimeuuid compares at)."""
    assert hasattr(value, "time")
    stamp = (value.time - 0x01B21DD213814000) // 10  # 100 ns since 1582 -> µs since 1970
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=stamp // 1000 * 1000)


def test_window_reads_return_exactly_the_rows_of_the_window(local_cluster: LocalCluster) -> None:
    setup = local_cluster.session()
    setup.execute(
        "CREATE KEYSPACE win WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    setup.execute(
        "CREATE TABLE win.t (pk int, ck int, v text, PRIMARY KEY (pk, ck)) "
        "WITH cdc = {'enabled': true}"
    )
    assert setup.wait_for_schema_agreement(wait_time=20)
    insert = setup.prepare("INSERT INTO win.t (pk, ck, v) VALUES (?, ?, ?)")
    insert.consistency_level = ConsistencyLevel.QUORUM
    execute_concurrent_with_args(setup, insert, [(i % 40, i, "v") for i in range(600)], 32)
    streams = sorted(
        {s for row in setup.execute(
            "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2"
        ) for s in row.streams}
    )  # fmt: skip
    for level, address in zip(
        (ConsistencyLevel.ONE, ConsistencyLevel.QUORUM), local_cluster.addresses[1:], strict=True
    ):
        session = local_cluster.session(only=address)
        window, whole = session.prepare(WINDOW), session.prepare(WHOLE)
        window.consistency_level = whole.consistency_level = level
        total = 0
        for stream in streams:
            rows = [tuple(r) for r in session.execute(whole, (stream,))]
            total += len(rows)
            if not rows:
                continue
            times = sorted({_ms(r[0]) for r in rows})
            low, high = times[len(times) // 4], times[3 * len(times) // 4]
            expected = [r for r in rows if low < _ms(r[0]) <= high]
            assert [tuple(r) for r in session.execute(window, (stream, low, high))] == expected
            empty = (times[-1], times[-1] + timedelta(hours=1))
            assert list(session.execute(window, (stream, *empty))) == []
        assert total == 600  # one log row per insert, each in its stream's partition

    writer = local_cluster.session(only=local_cluster.addresses[0])
    reader = local_cluster.session(only=local_cluster.addresses[2])
    window = reader.prepare(WINDOW)
    window.consistency_level = ConsistencyLevel.QUORUM
    before = datetime.now(UTC) - timedelta(seconds=5)
    writer.execute(insert, (7, 10_000, "fresh"))
    found = [
        (r[1], r[2])
        for stream in streams
        for r in reader.execute(window, (stream, before, before + timedelta(hours=1)))
    ]
    assert (7, 10_000) in found
