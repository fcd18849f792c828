"""Crash and restart: kill -9 after acknowledged writes, start again on the same data directory.

Proves ARCHITECTURE.md principle 3 end to end: every write the driver saw acknowledged, and its
CDC log rows, survive SIGKILL; the schema survives; the node keeps its host id and tokens and
its CDC generation (no new generation, the same streams); and a SIGTERM stops it cleanly (exit
code 0) with everything still there on the next start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cassandra.cluster import Session

from ringflow.cli._demo_cluster import NodeProcess, NodeStartError, random_loopback_address
from tests.integration.node.conftest import make_cluster, saved_tokens

ROWS = 200


def _snapshot(session: Session) -> dict[str, object]:
    local = session.execute("SELECT host_id, tokens, schema_version FROM system.local").one()
    generations = session.execute(
        "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'"
    )
    return {
        "host_id": local.host_id,
        "tokens": sorted(int(token) for token in local.tokens),
        "generations": [row.time for row in generations],
        "base": sorted(tuple(row) for row in session.execute("SELECT * FROM crash.t")),
        "log": session.execute("SELECT count(*) FROM crash.t_scylla_cdc_log").one()[0],
        "migrations": [
            row.version
            for row in session.execute(
                "SELECT version FROM system.schema_migrations WHERE key = 'migrations'"
            )
        ],
    }


def _with_session(node: NodeProcess, action: object) -> dict[str, object]:
    cluster = make_cluster(node)
    try:
        session = cluster.connect()
        result = action(session)  # type: ignore[operator]
        assert isinstance(result, dict)
        cluster.refresh_schema_metadata(max_schema_agreement_wait=10)
        keyspaces = set(cluster.metadata.keyspaces)
        result["schema"] = (
            "crash" in keyspaces
            and "t" in cluster.metadata.keyspaces["crash"].tables
            and "t_scylla_cdc_log" in cluster.metadata.keyspaces["crash"].tables
        )
        return result
    finally:
        cluster.shutdown()


def _write(session: Session) -> dict[str, object]:
    session.execute(
        "CREATE KEYSPACE crash WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute("CREATE TABLE crash.t (k int PRIMARY KEY, v text) WITH cdc = {'enabled': true}")
    insert = session.prepare("INSERT INTO crash.t (k, v) VALUES (?, ?)")
    for key in range(ROWS):
        session.execute(insert, (key, f"acknowledged {key}"))
    session.execute("UPDATE crash.t SET v = 'last' WHERE k = 0")
    return _snapshot(session)


def test_acknowledged_writes_schema_and_identity_survive_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    address = random_loopback_address()
    first = NodeProcess(data, address).start()
    try:
        before = _with_session(first, _write)
    finally:
        first.kill()
    assert before["log"] == ROWS + 1
    assert len(before["migrations"]) == 3  # type: ignore[arg-type]  # keyspace, table, CDC log
    assert len(before["base"]) == ROWS  # type: ignore[arg-type]

    second = NodeProcess(data, address).start()
    try:
        assert second.host_id == first.host_id
        after = _with_session(second, _snapshot)
        assert second.terminate() == 0
    finally:
        second.kill()
    assert after == before
    assert after["schema"] is True
    assert after["tokens"] == sorted(saved_tokens(second))
    assert len(after["generations"]) == 1  # type: ignore[arg-type]

    third = NodeProcess(data, address).start()
    try:
        assert _with_session(third, _snapshot) == before
    finally:
        third.kill()


def test_restart_with_another_cluster_name_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    address = random_loopback_address()
    first = NodeProcess(data, address).start()
    first.kill()
    wrong = NodeProcess(data, address, "--cluster-name", "other")
    with pytest.raises(NodeStartError, match="exited with 2"):
        wrong.start()
    assert "cluster_name" in wrong.log()
