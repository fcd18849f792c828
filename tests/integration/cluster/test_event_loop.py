"""Node processes run on uvloop by default and on asyncio's own loop with
``RINGFLOW_EVENT_LOOP=asyncio`` (``ringflow.runtime.run_event_loop``): each node's
``status.json`` names its loop, and a node on the standard loop serves the driver (DDL, QUORUM
write and read, paging, a CDC log read) exactly as the other tests' uvloop nodes do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.runtime import EVENT_LOOP_ENV
from tests.integration.cluster.conftest import LocalCluster, started_cluster, wait_until


def _loops(cluster: LocalCluster) -> list[str]:
    found = []
    for status in sorted(cluster.data.glob("node*/status.json")):
        found.append(str(json.loads(status.read_text()).get("event_loop")))
    return found


def test_a_node_on_the_standard_loop_serves_like_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    with started_cluster(tmp_path / "cluster", nodes=1) as cluster:
        wait_until(lambda: _loops(cluster) == ["asyncio"], 20, "status.json names asyncio")
        session = cluster.session()
        session.execute(
            "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}"
        )
        session.execute(
            "CREATE TABLE ks.t (k int, c int, v text, PRIMARY KEY (k, c)) "
            "WITH cdc = {'enabled': true}"
        )
        insert = session.prepare("INSERT INTO ks.t (k, c, v) VALUES (?, ?, ?)")
        insert.consistency_level = ConsistencyLevel.QUORUM
        for c in range(25):
            session.execute(insert, (1, c, f"v{c}"))
        select = SimpleStatement(
            "SELECT c, v FROM ks.t WHERE k = 1", fetch_size=10,
            consistency_level=ConsistencyLevel.QUORUM,
        )  # fmt: skip
        assert [(row.c, row.v) for row in session.execute(select)] == [
            (c, f"v{c}") for c in range(25)
        ]
        log = session.execute("SELECT count(*) FROM ks.t_scylla_cdc_log").one()
        assert log[0] == 25


def test_nodes_run_on_uvloop_when_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    with started_cluster(tmp_path / "cluster", nodes=1) as cluster:
        wait_until(lambda: _loops(cluster) == ["uvloop"], 20, "status.json names uvloop")
