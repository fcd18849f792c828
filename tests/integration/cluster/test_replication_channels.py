"""``ringflow replication channel ...`` and the nodes' Prometheus metrics against a 3-node cluster
of real processes (issue 14 §3):
channels are rows of the replicated ``system_replication.channels``, so a channel created
through one node is read through every other at QUORUM; each bad input is refused with exit
code 2 and one line naming it, before anything is written."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import LocalCluster, wait_until

pytestmark = pytest.mark.timeout(300)


def run(*arguments: str) -> tuple[int, str]:
    script = Path(sys.executable).parent / "ringflow"
    done = subprocess.run(
        [str(script), "replication", "channel", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def channel_rows(cluster: LocalCluster, through: str) -> dict[str, dict[str, object]]:
    session = cluster.session(only=through)
    query = SimpleStatement(
        "SELECT * FROM system_replication.channels", consistency_level=ConsistencyLevel.QUORUM
    )
    return {row.name: row._asdict() for row in session.execute(query)}


def test_channels_are_created_changed_paused_and_dropped_cluster_wide(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    first, second, third = local_cluster.addresses
    setup = local_cluster.session()
    setup.execute(
        "CREATE KEYSPACE shop WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    setup.execute(
        "CREATE TABLE shop.orders (id int PRIMARY KEY, v text) WITH cdc = {'enabled': true}"
    )
    setup.execute("CREATE TABLE shop.plain (id int PRIMARY KEY, v text)")
    assert setup.wait_for_schema_agreement(wait_time=20)
    source = ("--source", first)
    lake = tmp_path / "lake"

    code, out = run(
        "create", "hub", *source, "--table", "shop.orders", "--to", f"ringflow://{second}",
        "--priority", "80", "--lifo-order", "--slice-width-s", "2", "--slice-count", "3",
    )  # fmt: skip
    assert code == 0, out
    code, out = run("create", "lake", *source, "--table", "shop.orders", "--to", f"parquet:{lake}")
    assert code == 0, out  # no slicing given: it takes the table's (channels agree)
    rows = channel_rows(local_cluster, third)
    assert set(rows) == {"hub", "lake"}
    assert rows["hub"]["priority"] == 80 and rows["hub"]["transmission_order"] == "lifo"
    assert (rows["hub"]["slice_width_s"], rows["hub"]["slice_count"]) == (2, 3)
    assert rows["lake"]["destination"] == f"parquet:{lake.resolve()}"

    assert run("pause", "hub", *source)[0] == 0
    assert channel_rows(local_cluster, second)["hub"]["transmission_enabled"] is False
    assert channel_rows(local_cluster, second)["hub"]["collection_enabled"] is True
    assert run("pause", "hub", "--collection", *source)[0] == 0
    assert channel_rows(local_cluster, third)["hub"]["collection_enabled"] is False
    assert run("resume", "hub", "--collection", "--transmission", *source)[0] == 0
    resumed = channel_rows(local_cluster, first)["hub"]
    assert resumed["collection_enabled"] is True and resumed["transmission_enabled"] is True
    assert run("update", "hub", *source, "--priority", "10", "--fifo-order")[0] == 0
    updated = channel_rows(local_cluster, third)["hub"]
    assert updated["priority"] == 10 and updated["transmission_order"] == "fifo"
    code, out = run("list", *source)
    assert code == 0 and "hub" in out and "lake" in out

    assert run("drop", "lake", *source)[0] == 0
    assert set(channel_rows(local_cluster, second)) == {"hub"}


ORDERS = ("--table", "shop.orders", "--to", "parquet:/tmp/x")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("create", "x", "--table", "shop.nope", "--to", "parquet:/x"), "unknown table"),
        (("create", "x", "--table", "nope.t", "--to", "parquet:/x"), "unknown keyspace"),
        (("create", "x", "--table", "shop.plain", "--to", "parquet:/x"), "has no CDC"),
        (("create", "x", "--table", "orders", "--to", "parquet:/x"), "keyspace.table"),
        (("create", "x", "--table", "shop.orders", "--to", "ftp://h/x"), "expected"),
        (("create", "x", *ORDERS, "--priority", "0"), "priority"),
        (("create", "x", *ORDERS, "--slice-width-s", "0"), "slice_width_s"),
        (("create", "x", *ORDERS, "--slice-count", "1000"), "slice_count"),
        (("create", "hub", *ORDERS), "exists"),  # made by the test above
        (("create", "x", *ORDERS, "--slice-width-s", "5"), "slic"),  # hub slices 3 x 2 s
        (("update", "ghost", "--priority", "5"), "unknown channel"),
        (("drop", "ghost"), "unknown channel"),
        (("pause", "ghost"), "unknown channel"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    local_cluster: LocalCluster, arguments: tuple[str, ...], message: str
) -> None:
    before = channel_rows(local_cluster, local_cluster.addresses[1])
    code, out = run(*arguments, "--source", local_cluster.addresses[0])
    assert code == 2, out
    assert message in out, out
    assert "Traceback" not in out
    assert channel_rows(local_cluster, local_cluster.addresses[2]) == before


def scrape(address: str, port: int = 9180) -> dict[str, float]:
    """The node's Prometheus exposition, as name{labels} -> value."""
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def test_every_node_serves_its_capture_as_prometheus_metrics(local_cluster: LocalCluster) -> None:
    """Issue 14 §3: the figures of status.json (capture backlog and age, peers) are Prometheus
    metrics on each node's own address (default port 9180), and they follow the writes."""
    session = local_cluster.session()
    session.execute(
        "CREATE TABLE IF NOT EXISTS shop.metered (id int PRIMARY KEY, v text) "
        "WITH cdc = {'enabled': true}"
    )
    assert session.wait_for_schema_agreement(wait_time=20)
    before = {a: scrape(a)["ringflow_capture_rows"] for a in local_cluster.addresses}
    insert = session.prepare("INSERT INTO shop.metered (id, v) VALUES (?, ?)")
    insert.consistency_level = ConsistencyLevel.ALL
    for key in range(50):
        session.execute(insert, (key, "x"))
    for address in local_cluster.addresses:
        metrics: dict[str, float] = {}

        def grown(address: str = address, metrics: dict[str, float] = metrics) -> bool:
            metrics.update(scrape(address))
            return metrics["ringflow_capture_rows"] >= before[address] + 50

        wait_until(grown, 15, f"{address}'s capture rows metric")
        assert "ringflow_capture_oldest_age_seconds" in metrics
        assert metrics["ringflow_capture_over_cap"] == 0
        peers = {k: v for k, v in metrics.items() if k.startswith("ringflow_node_peer_up")}
        assert len(peers) == 3 and set(peers.values()) == {1.0}, peers
