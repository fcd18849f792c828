"""Bootstrap and decommission of real node processes under a QUORUM driver workload
(issue 7 §1, §2): a 4th node joins a 3-node RF 3 cluster, a node is decommissioned; every
acknowledged write stays readable at QUORUM and every change made a CDC generation."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("cassandra")

from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.cluster import Cluster, Session
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import free_block, ringflow

ONE = ConsistencyLevel.ONE


def _create_cdc_table(session: Session) -> None:
    session.execute(
        "CREATE KEYSPACE topo WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute("CREATE TABLE topo.t (k int PRIMARY KEY, v text) WITH cdc = {'enabled': true}")


def _stop(data: Path) -> None:
    """``ringflow cluster stop``, whatever state the test left the cluster in (not checked)."""
    subprocess.run(
        [str(Path(sys.executable).parent / "ringflow"), "cluster", "stop", "--data", str(data)],
        capture_output=True,
        timeout=60,
    )


@contextmanager
def _driver(address: str) -> Iterator[Session]:
    """A driver session through ``address``, its ``Cluster`` shut down however the block ends
    (one left running reconnects to the stopped nodes, logging from its threads, for the rest
    of the pytest worker's run)."""
    cluster = Cluster([address], protocol_version=4)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def _workload(address: str, keys: range, acked: list[int], stop: threading.Event) -> None:
    with _driver(address) as session:
        insert = session.prepare("INSERT INTO topo.t (k, v) VALUES (?, ?)")
        insert.consistency_level = ConsistencyLevel.QUORUM
        for key in keys:
            if stop.is_set():
                break
            try:
                session.execute(insert, (key, f"v{key}"))
            except Exception:  # not acknowledged: not required afterwards
                continue
            acked.append(key)


def _assert_published(session: Session, at_least: int) -> None:
    """At least ``at_least`` generations, each timestamp row with its streams rows."""
    query = "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'"
    times = [row.time for row in session.execute(SimpleStatement(query, consistency_level=ONE))]
    assert len(times) >= at_least, times
    streams = session.prepare(
        "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2 WHERE time = ?"
    )
    for started in times:
        assert list(session.execute(streams, (started,))), f"generation {started} has no streams"


def _streams_by_generation(address: str) -> dict[object, list[bytes]]:
    """The published generations and their streams, read at ONE through ``address`` alone."""
    policy = WhiteListRoundRobinPolicy([address])
    cluster = Cluster([address], protocol_version=4, load_balancing_policy=policy)
    try:
        session = cluster.connect()
        query = "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = %s"
        times = [row.time for row in session.execute(query, ("timestamps",))]
        streams = (
            "SELECT streams FROM system_distributed.cdc_streams_descriptions_v2 WHERE time = %s"
        )
        return {
            started: sorted(s for row in session.execute(streams, (started,)) for s in row.streams)
            for started in times
        }
    finally:
        cluster.shutdown()


def _assert_same_descriptions_everywhere(addresses: list[str]) -> None:
    """system_distributed has RF 3: with four nodes one of them holds no copy of a partition,
    and its reads must still answer (coordinated), the same as every other node's."""
    seen = {address: _streams_by_generation(address) for address in addresses}
    first = seen[addresses[0]]
    assert first and all(first.values()), first.keys()
    for address, found in seen.items():
        assert found == first, f"{address} sees other CDC descriptions"


def _assert_timestamps_rejected(session: Session) -> None:
    """A client timestamp 10 s ahead, or behind the current generation, is refused."""
    now_us = time.time_ns() // 1000
    for timestamp_us, reason in ((now_us + 10_000_000, "future"), (now_us - 120_000_000, "past")):
        with pytest.raises(InvalidRequest) as refused:
            session.execute(
                f"INSERT INTO topo.t (k, v) VALUES (-1, 'x') USING TIMESTAMP {timestamp_us}"
            )
        assert reason in str(refused.value).lower(), str(refused.value)


@pytest.mark.long  # `make test-long`: 70 s quiet; the topology simulations run both in CI
def test_bootstrap_then_decommission_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    base = free_block(5)
    prefix, last = base.rsplit(".", 1)
    first = base
    data = tmp_path / "cluster"
    ringflow(
        "cluster",
        "start",
        "--data",
        str(data),
        "--nodes",
        "3",
        "--first-address",
        first,
        "--gossip-interval-ms",
        "200",
        "--timeout",
        "90",
    )
    try:
        with _driver(first) as session:
            _create_cdc_table(session)
            acked: list[int] = []
            stop = threading.Event()
            writer = threading.Thread(target=_workload, args=(first, range(100_000), acked, stop))
            writer.start()
            try:
                ringflow("cluster", "add", "--data", str(data), "--timeout", "150", timeout_s=200)
            finally:
                stop.set()
                writer.join()
            fourth = f"{prefix}.{int(last) + 3}"
            status = json.loads((data / "node4" / "status.json").read_text())
            assert status["topology"]["phase"] == "done"
            assert status["topology"]["streamed_partitions"] > 0
            assert len(status["nodes"]) == 4

            _assert_published(session, at_least=2)
            _assert_same_descriptions_everywhere([f"{prefix}.{int(last) + i}" for i in range(4)])
            _assert_timestamps_rejected(session)

            ringflow(
                "cluster",
                "decommission",
                f"{prefix}.{int(last) + 2}",
                "--data",
                str(data),
                "--timeout",
                "150",
                timeout_s=200,
            )
            layout = json.loads((data / "cluster.json").read_text())
            assert len(layout["nodes"]) == 3
            _assert_published(session, at_least=3)

            with _driver(fourth) as check:
                select = check.prepare("SELECT v FROM topo.t WHERE k = ?")
                select.consistency_level = ConsistencyLevel.QUORUM
                missing = [k for k in acked if not list(check.execute(select, (k,)))]
            assert acked and not missing, f"{len(missing)} of {len(acked)} acknowledged writes lost"
    finally:
        _stop(data)


def test_removenode_restreams_a_dead_nodes_ranges(tmp_path: Path) -> None:
    """4 nodes RF 3, rows written at QUORUM, one node killed, ``removenode`` from the others:
    every row readable at QUORUM, the node gone from ``system.peers``, a second generation."""
    base = free_block(4)
    prefix, last = base.rsplit(".", 1)
    data = tmp_path / "cluster"
    ringflow(
        "cluster", "start", "--data", str(data), "--nodes", "4", "--first-address", base,
        "--gossip-interval-ms", "200", "--timeout", "90",
    )  # fmt: skip
    try:
        with _driver(base) as session:
            _create_cdc_table(session)
            insert = session.prepare("INSERT INTO topo.t (k, v) VALUES (?, ?)")
            insert.consistency_level = ConsistencyLevel.QUORUM
            for key in range(300):
                session.execute(insert, (key, f"v{key}"))
            dead = f"{prefix}.{int(last) + 2}"
            layout = json.loads((data / "cluster.json").read_text())
            host_id = next(n["host_id"] for n in layout["nodes"] if n["address"] == dead)
            ringflow("cluster", "kill", dead, "--data", str(data))
            ringflow("cluster", "removenode", host_id, "--data", str(data), "--timeout", "150",
                     timeout_s=200)  # fmt: skip
            _assert_published(session, at_least=2)
            peers = {row.peer for row in session.execute("SELECT peer FROM system.peers")}
            assert dead not in {str(peer) for peer in peers}
            select = session.prepare("SELECT v FROM topo.t WHERE k = ?")
            select.consistency_level = ConsistencyLevel.QUORUM
            missing = [k for k in range(300) if not list(session.execute(select, (k,)))]
            assert not missing, f"{len(missing)} rows lost"
    finally:
        _stop(data)
