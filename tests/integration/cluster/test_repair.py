"""Merkle-tree anti-entropy repair, ``ringflow cluster repair`` (issue 17), on 3 real nodes, RF 3.

How a replica is made to miss data: hints are disabled (``--max-hint-window-ms 1``: no hint is
kept for a replica down longer than 1 ms), C is SIGKILLed, and once A and B see it down, rows
are written, updated with a short TTL and deleted through A at ONE; C is restarted. C alone
(driver pinned to C, CL ONE: a coordinator reads its own replica first) then misses them. One
divergence, made once for the module, serves every test, in file order: preview, repair,
consistency of every replica (values, WRITETIME, TTL; deletions and expired cells stay
deleted), a second repair that streams nothing, history, ``cluster status``, a subrange, the CDC
log table, a replica down during a repair, and bad input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from ringflow.node import control_request
from tests.integration.cluster.conftest import (
    LocalCluster,
    started_cluster,
    wait_seen,
    wait_until,
)

pytestmark = pytest.mark.timeout(600)
ONE = ConsistencyLevel.ONE
ALL = ConsistencyLevel.ALL
SHORT_TTL_S = 2
LONG_TTL_S = 100_000


def repair(cluster: LocalCluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "ringflow"
    command = [str(script), "cluster", "repair", *arguments, "--data", str(cluster.data)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.stdout.strip(), result.stderr
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def tables_of(summary: dict[str, object]) -> dict[str, dict[str, object]]:
    tables = summary["tables"]
    assert isinstance(tables, list)
    return {str(t["table"]): t for t in tables}


Rows = dict[tuple[int, int], tuple[str | None, int | None, int | None]]


def rows_alone(session: Session, table: str) -> Rows:
    """``(k, c) -> (v, WRITETIME(v), TTL(v))`` as one replica alone answers at ONE."""
    query = f"SELECT k, c, v, WRITETIME(v), TTL(v) FROM rp.{table}"
    found: Rows = {}
    for row in session.execute(SimpleStatement(query, consistency_level=ONE, fetch_size=1000)):
        found[(row[0], row[1])] = (row[2], row[3], row[4])
    return found


def same_rows(first: Rows, second: Rows, ttl_slack_s: int = 300) -> bool:
    """Equal values and write timestamps; TTLs both set or both not, equal within
    ``ttl_slack_s`` (the seconds between the two reads: remaining TTLs count down)."""
    if first.keys() != second.keys():
        return False
    for key, (value, written, ttl) in first.items():
        other = second[key]
        if (value, written) != other[:2] or (ttl is None) != (other[2] is None):
            return False
        if ttl is not None and other[2] is not None and abs(ttl - other[2]) > ttl_slack_s:
            return False
    return True


@dataclass
class Diverged:
    cluster: LocalCluster
    sessions: dict[str, Session]
    reference: dict[str, Rows]
    """What A alone held for each table right after the writes C missed."""
    cdc_log_rows_before: int = 0


def _write_while_down(session: Session) -> None:
    def run(cql: str) -> None:
        session.execute(SimpleStatement(cql, consistency_level=ONE))

    for k in range(100, 160):
        run(f"INSERT INTO rp.t (k, c, v) VALUES ({k}, 0, 'new{k}') USING TTL {LONG_TTL_S}")
    for k in range(0, 5):  # deletions: C keeps the old rows unless the tombstones reach it
        run(f"DELETE FROM rp.t WHERE k = {k}")
    run(f"UPDATE rp.t USING TTL {SHORT_TTL_S} SET v = 'short' WHERE k = 5 AND c = 0")
    for k in range(100, 200):
        run(f"INSERT INTO rp.sub (k, c, v) VALUES ({k}, 0, 'x{k}')")
    for k in range(100, 120):
        run(f"INSERT INTO rp.logged (k, c, v) VALUES ({k}, 0, 'l{k}')")


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Diverged]:
    data = tmp_path_factory.mktemp("repair")
    # no hints kept; captured slices kept (not dropped once sealed) so the test can see them
    options = ("--max-hint-window-ms", "1", "--drop-sent-slices", "off")
    with started_cluster(data, *options) as cluster:
        a, b, c = cluster.addresses
        setup = cluster.session(only=a)
        setup.execute(
            "CREATE KEYSPACE rp WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 3}"
        )
        for table in ("t", "sub"):
            setup.execute(f"CREATE TABLE rp.{table} (k int, c int, v text, PRIMARY KEY (k, c))")
        setup.execute(
            "CREATE TABLE rp.logged (k int, c int, v text, PRIMARY KEY (k, c)) "
            "WITH cdc = {'enabled': true}"
        )
        assert setup.wait_for_schema_agreement(wait_time=20)
        for k in range(0, 20):
            cql = f"INSERT INTO rp.t (k, c, v) VALUES ({k}, 0, 'old{k}')"
            setup.execute(SimpleStatement(cql, consistency_level=ALL))
        cluster.kill(c)
        wait_seen(cluster, [a, b], {c: "DN"})
        time.sleep(0.2)  # down longer than the 1 ms hint window
        _write_while_down(setup)
        time.sleep(SHORT_TTL_S + 1)  # the short-TTL cell has expired: a tombstone now
        reference = {table: rows_alone(setup, table) for table in ("t", "sub", "logged")}
        log_query = "SELECT count(*) FROM rp.logged_scylla_cdc_log"
        log_rows = setup.execute(SimpleStatement(log_query, consistency_level=ONE)).one()[0]
        cluster.restart(c)
        cluster.wait_ready()
        wait_seen(cluster, [a, b, c], {a: "UN", b: "UN", c: "UN"})
        sessions = {address: cluster.session(only=address) for address in cluster.addresses}
        yield Diverged(cluster, sessions, reference, log_rows)


def test_replica_misses_rows_before_repair_and_preview_reports_them(diverged: Diverged) -> None:
    """C alone misses the rows written while it was down and still holds the deleted ones;
    ``--preview`` reports mismatching ranges, streams nothing and exits 0."""
    c = diverged.cluster.addresses[2]
    alone = rows_alone(diverged.sessions[c], "t")
    assert not same_rows(alone, diverged.reference["t"])
    assert (100, 0) not in alone and (0, 0) in alone and alone[(5, 0)][0] == "old5"
    result = repair(diverged.cluster, "rp.t", "--preview", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    table = tables_of(summary_of(result))["t"]
    assert table["leaves_mismatching"] > 0 and table["mismatching_ranges"]
    # Partition sends: the 60 rows C lacks go to C only; the 6 partitions C holds in an older
    # version (5 deleted, 1 expired cell) go both ways, A's to C and C's to A and B (digests
    # cannot tell which version is newer; applying the older one changes nothing): 60 + 6 * 3
    assert table["partitions_differing"] == 78
    assert table["partitions_streamed"] == 0 and table["bytes_streamed"] == 0
    assert rows_alone(diverged.sessions[c], "t") == alone  # nothing streamed
    human = repair(diverged.cluster, "rp.t", "--preview")
    assert human.returncode == 0 and "would stream (" in human.stdout


def test_repair_makes_every_replica_alone_return_the_same_rows(diverged: Diverged) -> None:
    """After ``cluster repair rp.t`` every replica alone at ONE returns the same rows, values,
    WRITETIMEs and TTLs as A had: C got the new rows, the deletions (tombstones) and the
    expired cell (not resurrected: k=5 has no v), and a second preview finds nothing."""
    result = repair(diverged.cluster, "rp.t", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    table = tables_of(summary_of(result))["t"]
    assert table["partitions_streamed"] == 78 and table["bytes_streamed"] > 0  # as previewed
    assert table["ranges_failed"] == [] and table["ranges_repaired"] == table["ranges"]
    expected = diverged.reference["t"]
    assert (0, 0) not in expected and expected[(5, 0)][0] is None and (100, 0) in expected
    replicas = {a: rows_alone(diverged.sessions[a], "t") for a in diverged.cluster.addresses}
    first = replicas[diverged.cluster.addresses[0]]
    for address, alone in replicas.items():
        assert same_rows(alone, expected), address
        assert same_rows(alone, first, ttl_slack_s=3), address  # read seconds apart
        assert 0 < (alone[(100, 0)][2] or 0) <= LONG_TTL_S  # the TTL came along
    again = repair(diverged.cluster, "rp.t", "--preview", "--json")
    assert again.returncode == 0
    table = tables_of(summary_of(again))["t"]
    assert table["leaves_mismatching"] == 0 and table["mismatching_ranges"] == []


def test_repair_of_a_consistent_table_streams_nothing(diverged: Diverged) -> None:
    result = repair(diverged.cluster, "rp.t", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    table = tables_of(summary_of(result))["t"]
    assert table["leaves_compared"] > 0 and table["leaves_mismatching"] == 0
    assert table["partitions_streamed"] == 0 and table["bytes_streamed"] == 0


def test_primary_ranges_of_every_node_cover_the_ring_once(diverged: Diverged) -> None:
    """``--pr`` run on every node repairs each range once: the nodes' primary ranges add up
    to the ranges one full repair covers."""
    full = tables_of(summary_of(repair(diverged.cluster, "rp.t", "--preview", "--json")))["t"]
    runs = [("--pr", "--preview", "--json", "--node", a) for a in diverged.cluster.addresses]
    with ThreadPoolExecutor(len(runs)) as pool:  # each node coordinates its own: at once
        results = list(
            pool.map(lambda arguments: repair(diverged.cluster, "rp.t", *arguments), runs)
        )
    for run in results:
        assert run.returncode == 0, run.stdout + run.stderr
    primary = [int(tables_of(summary_of(run))["t"]["ranges"]) for run in results]
    assert all(0 < ranges < int(full["ranges"]) for ranges in primary)
    assert sum(primary) == full["ranges"]


def test_history_and_status_show_the_repair(diverged: Diverged) -> None:
    a = diverged.cluster.addresses[0]
    query = (
        "SELECT status, parent_id, range_begin, participants FROM system_distributed.repair_history"
        " WHERE keyspace_name = 'rp' AND columnfamily_name = 't'"
    )
    rows = list(diverged.sessions[a].execute(query))
    assert rows and all(row.status == "SUCCESS" for row in rows)
    assert all(len(row.participants) == 3 for row in rows)
    parents = list(
        diverged.sessions[a].execute(
            "SELECT parent_id, keyspace_name, columnfamily_names "
            "FROM system_distributed.parent_repair_history"
        )
    )
    assert {row.parent_id for row in rows} <= {row.parent_id for row in parents}
    script = Path(sys.executable).parent / "ringflow"
    status = subprocess.run(
        [str(script), "cluster", "status", "--data", str(diverged.cluster.data)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0 and "last repair rp.t: " in status.stdout


def _token(session: Session, k: int) -> int:
    return int(session.execute(f"SELECT token(k) FROM rp.sub WHERE k = {k} LIMIT 1").one()[0])


def test_subrange_repair_touches_only_its_range(diverged: Diverged) -> None:
    """A repair of ``(start, end]`` brings C exactly the missed rows whose token lies in it."""
    a, _, c = diverged.cluster.addresses
    tokens = {k: _token(diverged.sessions[a], k) for k in range(100, 200)}
    ordered = sorted(tokens.values())
    start, end = ordered[24], ordered[74]  # 50 of the 100 missed rows: tokens (start, end]
    before = rows_alone(diverged.sessions[c], "sub")
    assert not any(k >= 100 for k, _ in before)
    result = repair(
        diverged.cluster, "rp.sub", "--start-token", str(start), "--end-token", str(end), "--json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    after = rows_alone(diverged.sessions[c], "sub")
    inside = {k for k, token in tokens.items() if start < token <= end}
    assert len(inside) == 50
    assert {k for k, _ in after if k >= 100} == inside


def test_repair_through_cql_is_coordinated_by_the_node_called(diverged: Diverged) -> None:
    """``CALL NodeOps.repair(...)`` / ``repairWithOptions(...)`` (the management API's form) on
    any node: that node coordinates. B previews the rest of ``rp.sub`` C still misses (after
    the subrange repair above), C repairs it asynchronously (the answer comes at once, the
    outcome lands in ``parent_repair_history``), then the prepared three-argument form waits for
    a repair that finds nothing left. Bad calls are InvalidRequest, nothing started."""
    a, b, c = diverged.cluster.addresses
    preview = (
        diverged.sessions[b]
        .execute("CALL NodeOps.repairWithOptions('rp', ['sub'], {'preview': 'true'})", timeout=120)
        .one()
    )
    assert preview.status == "previewed", preview
    summary = json.loads(preview.summary)
    assert summary["coordinator"] == f"{b}:7000"
    table = tables_of(summary)["sub"]
    assert table["partitions_differing"] >= 50 and table["partitions_streamed"] == 0
    assert not same_rows(rows_alone(diverged.sessions[c], "sub"), diverged.reference["sub"])

    started = (
        diverged.sessions[c]
        .execute("CALL NodeOps.repair('rp', ['sub'], true, true, 'parallel', null, null, 1)")
        .one()
    )
    assert started.status == "started" and started.summary is None
    history = diverged.sessions[a].prepare(
        "SELECT finished_at, exception_message "
        "FROM system_distributed.parent_repair_history WHERE parent_id = ?"
    )
    repair_id = uuid.UUID(started.repair_id)
    wait_until(
        lambda: diverged.sessions[a].execute(history, (repair_id,)).one() is not None,
        180,
        "the asynchronous repair recorded",
    )
    assert diverged.sessions[a].execute(history, (repair_id,)).one().exception_message is None
    sessions = diverged.sessions[a].execute(
        "SELECT parent_id, coordinator FROM system_distributed.repair_history "
        "WHERE keyspace_name = 'rp' AND columnfamily_name = 'sub'"
    )
    assert {str(row.coordinator) for row in sessions if row.parent_id == repair_id} == {c}
    assert same_rows(rows_alone(diverged.sessions[c], "sub"), diverged.reference["sub"])

    prepared = diverged.sessions[b].prepare("CALL NodeOps.repair(?, ?, ?)")
    done = diverged.sessions[b].execute(prepared, ("rp", ["sub"], True), timeout=120).one()
    assert done.status == "finished"
    table = tables_of(json.loads(done.summary))["sub"]
    assert table["leaves_mismatching"] == 0 and table["partitions_streamed"] == 0

    for call, message in (
        ("CALL NodeOps.repair('nosuch', null, true)", "Keyspace nosuch does not exist"),
        ("CALL NodeOps.repair('rp', ['nosuch'], true)", "unconfigured table rp.nosuch"),
        ("CALL NodeOps.repair('rp', null, false)", "incremental repair is not supported"),
        ("CALL NodeOps.repairWithOptions('rp', null, {'start_token': '5'})", "needs both"),
        ("CALL NodeOps.repairWithOptions('rp', null, {'fast': 'true'})", "unknown repair option"),
        ("CALL NodeOps.nosuch('rp')", "Unknown procedure nodeops.nosuch"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            diverged.sessions[b].execute(call)


def test_cdc_log_table_repaired_without_new_log_rows(diverged: Diverged) -> None:
    """Repairing the keyspace repairs the CDC log table like any table: C alone then holds the
    log rows it missed, the cluster holds no more log rows than before (repair streams rows, it
    does not write through the CDC path), and C's capture has them out of sequence."""
    c = diverged.cluster.addresses[2]
    log_query = "SELECT count(*) FROM rp.logged_scylla_cdc_log"

    def log_rows(address: str) -> int:
        statement = SimpleStatement(log_query, consistency_level=ONE)
        return int(diverged.sessions[address].execute(statement).one()[0])

    assert log_rows(c) < diverged.cdc_log_rows_before
    result = repair(diverged.cluster, "rp", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    tables = tables_of(summary_of(result))
    assert tables["logged_scylla_cdc_log"]["partitions_streamed"] > 0
    assert same_rows(rows_alone(diverged.sessions[c], "logged"), diverged.reference["logged"])
    for address in diverged.cluster.addresses:
        assert log_rows(address) == diverged.cdc_log_rows_before, address
    # C's replica-side capture took the 20 log rows repair brought as out-of-sequence (its
    # in-sequence slices never saw them: they were written while C was down)
    query = (
        "SELECT out_of_sequence, row_count FROM system_replication.local_slices "
        "WHERE keyspace_name = 'rp' AND table_name = 'logged'"
    )
    slices = list(diverged.sessions[c].execute(query))
    assert sum(r.row_count for r in slices if r.out_of_sequence) >= 20, slices


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("nosuch",), "Keyspace nosuch does not exist"),
        (("rp.nosuch",), "unconfigured table rp.nosuch"),
        (("rp.t", "--start-token", "0", "--end-token", str(2**63)), "Murmur3 token bounds"),
        (("rp.t", "--start-token", "5"), "needs both"),
    ],
)
def test_bad_input_is_a_clear_error(
    diverged: Diverged, arguments: tuple[str, ...], message: str
) -> None:
    result = repair(diverged.cluster, *arguments)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def test_replica_dying_mid_repair_fails_its_ranges_and_the_rest_goes_on(
    diverged: Diverged,
) -> None:
    """The last test of the module (C stays down). C is SIGKILLed while A coordinates a repair
    of the whole keyspace: the ranges repaired before stay repaired, every range after fails
    naming C, the repair still ends (exit 1). A repair run while C is down says which ranges it
    could not repair; asking the dead node to coordinate is a clear error (exit 2)."""
    a, b, c = diverged.cluster.addresses
    script = Path(sys.executable).parent / "ringflow"
    command = [str(script), "cluster", "repair", "rp", "--json", "--node", a]
    running = subprocess.Popen(
        [*command, "--data", str(diverged.cluster.data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    coordinator = diverged.cluster.data / "node1"

    def repaired_some() -> bool:  # asked over the node's request channel, as the CLI does
        progress = control_request(coordinator, {"request": "repair-status"})["progress"]
        return any(done >= 1 for tables in progress.values() for done, _ in tables.values())

    wait_until(repaired_some, 60, "a range repaired")
    pid = int((diverged.cluster.data / "node3" / "pid").read_text())
    os.kill(pid, signal.SIGKILL)  # directly: the CLI's own start-up would give the repair time
    stdout, stderr = running.communicate(timeout=300)
    assert running.returncode == 1, stdout + stderr
    tables = tables_of(json.loads(stdout))
    assert sum(int(t["ranges_repaired"]) for t in tables.values()) > 0
    failed = [reason for t in tables.values() for _, reason in t["ranges_failed"]]
    assert failed and all(c in reason for reason in failed), failed
    wait_seen(diverged.cluster, [a, b], {c: "DN"})
    result = repair(diverged.cluster, "rp.t", "--node", a)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"replica {c}:7000 is down" in result.stdout
    assert "ranges could not be repaired" in result.stdout
    dead = repair(diverged.cluster, "rp.t", "--node", c)
    assert dead.returncode == 2 and f"cannot reach node {c}" in dead.stderr
