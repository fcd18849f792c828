"""``ringflow diff`` end to end: a real edge node (CDC on) replicated by ``ringflow replicate
--once`` to a real hub node, a Parquet lake and a throwaway PostgreSQL, then compared through
the CLI's ``main`` in this process (sharing the session's SparkSession).

Proves: right after replication each destination is reported equal to the edge table (exit 0,
no difference, the same row counts as the driver-side oracle ``compare`` of the demo finds);
after four writes on the edge that are not replicated, the diff against each destination (hub
cluster, lake live state, PostgreSQL live view) finds exactly one missing row, one extra row,
one changed value and one changed write timestamp, with their keys (exit 1, table and JSON);
bad input (unknown keyspace or table, an unreachable target, a malformed URL, a lake directory
that does not exist) exits 2 with one line and writes nothing.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import DDL, KEYSPACE, TABLE, Workload, compare, read_cql_table
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.pipeline import PipelineConfigError
from ringflow.pipeline._diff import _runs, _spans
from ringflow.pipeline._replicate import cdc_options, source_table
from ringflow.pipeline._table_source import token_spans
from tests.spark.test_replicate import CONFIDENCE_MS, _session

SPLITS = "16"
NEW_KEY = (90_001, 1)


@pytest.fixture(scope="module")
def diff_postgres(postgres_url: str) -> str:
    """A database of this module's own on the session's PostgreSQL: other test files on the
    same pytest worker replicate shop.orders there too, and their rows would be extra here."""
    name = f"ringflow_diff_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="module")
def replicated(diff_postgres: str) -> Iterator[dict[str, Any]]:
    """An edge node and a hub node with shop.orders; a workload replicated once to the hub, a
    lake and PostgreSQL."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-diff-"))
    edge = NodeProcess(base / "edge", random_loopback_address(), "--num-tokens", "4")
    hub = NodeProcess(base / "hub", random_loopback_address(), "--num-tokens", "4")
    clusters: list[Any] = []
    try:
        found: dict[str, Any] = {"edge": edge.start(), "hub": hub.start(), "base": base}
        for name, node, cdc in (("edge", edge, " WITH cdc = {'enabled': true}"), ("hub", hub, "")):
            cluster, session = _session(node)
            clusters.append(cluster)
            session.execute(
                f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))
            found[name + "_session"] = session
        workload = Workload(found["edge_session"], 300, 5)
        for _ in range(300):
            _, statement, values = workload.next_operation()
            found["edge_session"].execute(statement, values)
        time.sleep(CONFIDENCE_MS / 1000 + 1.6)  # past the window, and the 1 s TTLs have run out
        code = main(
            [
                "replicate",
                *("--source", edge.endpoint, "--table", f"{KEYSPACE}.{TABLE}"),
                *("--to", f"ringflow://{hub.endpoint}?consistency=ONE"),
                *("--to", f"parquet:{base / 'lake'}", "--to", diff_postgres),
                *("--checkpoint", str(base / "checkpoints"), "--once"),
                *("--confidence-window-ms", str(CONFIDENCE_MS), "--query-window-ms", "5000"),
            ]
        )
        assert code == 0
        yield found
    finally:
        for cluster in clusters:
            cluster.shutdown()
        edge.kill()
        hub.kill()


def _targets(replicated: dict[str, Any], postgres_url: str) -> dict[str, str]:
    return {
        "hub": replicated["hub"].endpoint,
        "lake": f"lake:{replicated['base'] / 'lake'}",
        "postgres": postgres_url,
    }


def _diff(replicated: dict[str, Any], target: str, *extra: str) -> int:
    return main(
        [
            "diff",
            *("--source", replicated["edge"].endpoint, "--target", target),
            *("--table", f"{KEYSPACE}.{TABLE}", "--splits", SPLITS),
            *extra,
        ]
    )


def _report(capsys: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_destinations_equal_the_edge_after_replication(
    spark: SparkSession, replicated: dict[str, Any], diff_postgres: str, capsys: Any
) -> None:
    table = source_table(cdc_options(replicated["edge"].endpoint, f"{KEYSPACE}.{TABLE}"))
    rows = len(read_cql_table(replicated["edge_session"], table))
    assert (
        compare(
            read_cql_table(replicated["edge_session"], table),
            read_cql_table(replicated["hub_session"], table),
        )[1]
        == []
    )
    for name, target in _targets(replicated, diff_postgres).items():
        assert _diff(replicated, target, "--json") == 0, name
        report = _report(capsys)
        assert report["equal"] is True, name
        assert report["counts"] == {"missing": 0, "extra": 0, "values": 0, "writetime": 0}
        assert report["source_rows"] == report["target_rows"] == rows > 50, name


def _changes_on_the_edge(session: Any, table: Any) -> dict[str, str]:
    """Four writes the destinations do not get: the key text of each kind of difference."""
    rows = read_cql_table(session, table)
    with_status = sorted(k for k, (v, _) in rows.items() if "status" in v and "qty" in v)
    changed, retimed, deleted = with_status[0], with_status[1], with_status[2]
    (_, times), (values, retimed_times) = rows[changed], rows[retimed]
    session.execute(
        "UPDATE shop.orders USING TIMESTAMP %s SET status = 'diffed' "
        "WHERE customer = %s AND order_id = %s",
        (times["status"] + 1, *changed),
    )
    session.execute(
        "UPDATE shop.orders USING TIMESTAMP %s SET qty = %s WHERE customer = %s AND order_id = %s",
        (retimed_times["qty"] + 1, values["qty"], *retimed),
    )
    session.execute("DELETE FROM shop.orders WHERE customer = %s AND order_id = %s", deleted)
    session.execute(
        "INSERT INTO shop.orders (customer, order_id, status) VALUES (%s, %s, 'new')", NEW_KEY
    )

    def text(key: tuple[object, ...]) -> str:
        return "[" + ", ".join(str(part) for part in key) + "]"

    return {
        "missing": text(NEW_KEY),
        "extra": text(deleted),
        "values": text(changed),
        "writetime": text(retimed),
    }


def test_diff_finds_missing_extra_changed_and_retimed_rows(
    spark: SparkSession, replicated: dict[str, Any], diff_postgres: str, capsys: Any
) -> None:
    table = source_table(cdc_options(replicated["edge"].endpoint, f"{KEYSPACE}.{TABLE}"))
    keys = _changes_on_the_edge(replicated["edge_session"], table)
    for name, target in _targets(replicated, diff_postgres).items():
        assert _diff(replicated, target, "--json", "--examples", "3") == 1, name
        report = _report(capsys)
        assert report["equal"] is False
        assert report["counts"] == {"missing": 1, "extra": 1, "values": 1, "writetime": 1}, name
        for kind, key in keys.items():
            assert [e["key"] for e in report["examples"][kind]] == [key], (name, kind)
        assert '"diffed"' in report["examples"]["values"][0]["source"]
        assert report["examples"]["missing"][0]["target"] == "-"
        retimed = report["examples"]["writetime"][0]
        assert retimed["source"] != retimed["target"] and '"qty"' in retimed["source"]
        assert 1 <= report["ranges_differing"] <= 4
    assert _diff(replicated, replicated["hub"].endpoint) == 1  # the table form
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and "missing" in out and keys["missing"] in out


def test_bad_input_exits_2_and_writes_nothing(
    spark: SparkSession, replicated: dict[str, Any], capsys: Any, tmp_path: Path
) -> None:
    hub = replicated["hub"].endpoint
    absent_lake = tmp_path / "no-lake"
    cases = {
        "unknown table": ["--table", "shop.nope", "--target", hub],
        "unknown keyspace": ["--table", "nope.orders", "--target", hub],
        "unreachable target": ["--table", "shop.orders", "--target", "127.0.0.1:1"],
        "malformed URL": ["--table", "shop.orders", "--target", "ftp://somewhere/x"],
        "no lake there": ["--table", "shop.orders", "--target", f"lake:{absent_lake}"],
        "unreachable PostgreSQL": [
            *("--table", "shop.orders", "--target", "postgresql://nobody@127.0.0.1:1/db"),
        ],
        "bad table name": ["--table", "orders", "--target", hub],
    }
    for name, arguments in cases.items():
        code = main(["diff", "--source", replicated["edge"].endpoint, *arguments])
        captured = capsys.readouterr()
        assert code == 2, name
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ringflow diff: error:"), (name, lines)
        assert captured.out == "", name
    assert not absent_lake.exists()


def test_row_pass_reads_only_the_differing_ranges_merged() -> None:
    ranges = [(-(2**63), -10), (-10, 0), (0, 10), (10, 2**63 - 1)]
    assert _runs(ranges, [3, 0, 1]) == [(-(2**63), 0), (10, 2**63 - 1)]
    assert _spans(ranges, [2]) == "0:10"
    assert token_spans({"token_ranges": "10:20,-5:0"}) == [(-5, 0), (10, 20)]
    for bad in ("1:1", "5", "0:10,5:15", "x:1", f"0:{2**63}"):
        with pytest.raises(PipelineConfigError, match="token"):
            token_spans({"token_ranges": bad})
