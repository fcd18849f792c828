"""Replica-side capture on a 3-node RF 3 cluster of real processes, written through the Scylla
driver at QUORUM (seed 002; issue 14 §1), with slices of 2 s x 2.

Proves: with every node up, each node captures every row and seals, for each (table, range,
slice), the same digest as the others; after a node is SIGKILLed mid-load and restarted (its
missed writes coming back as hints), every node's capture holds exactly the CDC log rows its
own log table holds, and every acknowledged write is captured on at least a quorum of
replicas. The nodes' stores are read with the storage layer's own API once the cluster is
stopped (so that test comes last), and, while it runs, the sealed digests straight from each
store's SQLite file, read-only.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel

from ringflow.storage import WHOLE_RING, Store
from tests.integration.cluster.conftest import (
    LocalCluster,
    ringflow,
    started_cluster,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)
QUORUM = ConsistencyLevel.QUORUM
LOG_TABLE = ("ks", "events_scylla_cdc_log")
Columns = tuple[tuple[str, bytes | None], ...]


@pytest.fixture(scope="module")
def capture_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("capture")
    options = (
        "--slice-width-s", "2", "--slice-count", "2", "--num-tokens", "4",
        "--drop-sent-slices", "off",  # no channels: synch-delete would drop every slice
    )  # fmt: skip
    with started_cluster(data, *options) as cluster:
        session = cluster.session()
        session.execute(
            "CREATE KEYSPACE ks WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 3}"
        )
        session.execute(
            "CREATE TABLE ks.events (k int, c int, v text, PRIMARY KEY (k, c)) "
            "WITH cdc = {'enabled': true}"
        )
        assert session.wait_for_schema_agreement(wait_time=20)
        yield cluster


def _status(cluster: LocalCluster, index: int) -> dict[str, object]:
    document = json.loads((cluster.data / f"node{index + 1}" / "status.json").read_text())
    capture = document["capture"]
    assert isinstance(capture, dict)
    return capture


def _all_sealed(cluster: LocalCluster, rows_at_least: int) -> bool:
    for index in range(len(cluster.addresses)):
        capture = _status(cluster, index)
        if capture["slices_open"] != 0 or int(str(capture["rows"])) < rows_at_least:
            return False
    return True


def _store_path(cluster: LocalCluster, index: int) -> Path:
    return cluster.data / f"node{index + 1}" / "store.sqlite"


def _sealed_digests(cluster: LocalCluster, index: int) -> dict[tuple[object, ...], bytes]:
    """In-sequence sealed slices of one node, read-only from its store file (the node runs)."""
    uri = f"file:{_store_path(cluster, index)}?mode=ro"
    database = sqlite3.connect(uri, uri=True, timeout=10)
    try:
        rows = database.execute(
            "SELECT keyspace, table_name, range_start, range_end, slice_start_ms, digest "
            "FROM capture_slices WHERE sealed_ms IS NOT NULL AND out_of_sequence = 0"
        ).fetchall()
    finally:
        database.close()
    return {tuple(row[:5]): bytes(row[5]) for row in rows}


def _write(session: object, keys: range, acked: list[int], stop: threading.Event) -> None:
    """QUORUM inserts of ``keys`` (16 in flight); the keys acknowledged go to ``acked``."""
    insert = session.prepare("INSERT INTO ks.events (k, c, v) VALUES (?, 1, ?)")  # type: ignore[attr-defined]
    insert.consistency_level = QUORUM
    pending: list[tuple[int, object]] = []
    for key in keys:
        if stop.is_set():
            break
        pending.append((key, session.execute_async(insert, (key, f"v{key}"))))  # type: ignore[attr-defined]
        if len(pending) >= 16:
            _settle(pending, acked)
    _settle(pending, acked)


def _settle(pending: list[tuple[int, object]], acked: list[int]) -> None:
    for key, future in pending:
        try:
            future.result()  # type: ignore[attr-defined]
        except Exception:  # a write through the killed node, or refused: not acknowledged
            continue
        acked.append(key)
    pending.clear()


def test_replicas_seal_the_same_digests_with_every_node_up(capture_cluster: LocalCluster) -> None:
    session = capture_cluster.session()
    acked: list[int] = []
    _write(session, range(0, 200), acked, threading.Event())
    assert len(acked) == 200
    wait_until(lambda: _all_sealed(capture_cluster, 200), 30, "every slice sealed on every node")
    digests = [_sealed_digests(capture_cluster, index) for index in range(3)]
    assert len(digests[0]) >= 4  # several ranges (12 vnodes) and slices
    assert digests[0] == digests[1] == digests[2]
    for index in range(3):
        status = _status(capture_cluster, index)
        assert status["unresolved_rows"] == 0 and status["rows"] == 200


def test_after_kill_9_and_restart_the_capture_holds_every_logged_row(
    capture_cluster: LocalCluster,
) -> None:
    cluster = capture_cluster
    third = cluster.addresses[2]
    session = cluster.session()
    acked: list[int] = []
    stop = threading.Event()
    writer = threading.Thread(target=_write, args=(session, range(1000, 10**6), acked, stop))
    writer.start()
    try:
        wait_until(lambda: len(acked) >= 150, 30, "150 writes acknowledged before the kill")
        cluster.kill(third)  # mid-load: the writer goes on
        at_kill = len(acked)
        wait_until(lambda: len(acked) >= at_kill + 300, 60, "300 writes acked with a node down")
    finally:
        stop.set()
        writer.join(timeout=120)
        cluster.restart(third)
    assert not writer.is_alive()
    cluster.wait_ready()
    _write(cluster.session(), range(2000, 2100), acked, threading.Event())
    total = 200 + len(acked)
    wait_until(lambda: _all_sealed(cluster, total), 90, "hints replayed, every slice sealed")
    cluster.close_drivers()
    ringflow("cluster", "stop", "--data", str(cluster.data), timeout_s=30)  # the module's last
    keys_captured: Counter[int] = Counter()
    for index in range(3):
        with Store(_store_path(cluster, index)) as store:
            logged, captured = _log_rows(store), _captured_rows(store)
            assert captured == logged, f"node {index + 1}: capture != log table"
            keys_captured.update({_key(row) for row in captured})
    assert all(keys_captured[key] >= 2 for key in acked), "an acked write on < 2 captures"


def _key(columns: Columns) -> int:
    value = dict(columns)["k"]
    assert value is not None
    return int.from_bytes(value, "big", signed=True)


def _log_rows(store: Store) -> Counter[Columns]:
    log = store.table(*LOG_TABLE)
    found: Counter[Columns] = Counter()
    state = None
    now_s = int(time.time())
    while True:
        page = store.scan(log, *WHOLE_RING, page_size=1000, paging_state=state, now_s=now_s)
        for row in page.rows:
            columns: dict[str, bytes | None] = dict(row.values)
            columns["cdc$stream_id"] = row.partition_key[0]
            columns["cdc$time"], columns["cdc$batch_seq_no"] = row.clustering
            found[tuple(sorted(columns.items()))] += 1
        state = page.paging_state
        if state is None:
            return found


def _captured_rows(store: Store) -> Counter[Columns]:
    found: Counter[Columns] = Counter()
    slices = store.capture.slices(limit=10_000)
    for captured in slices:
        after = 0
        while rows := store.capture.rows(captured.key, after_seq=after, limit=10_000):
            found.update(tuple(sorted(row.columns.items())) for row in rows)
            after = rows[-1].seq
    return found
