"""The v1 -> v2 CDC generation upgrade on real processes (issue 7 §3, §4 "Upgrade"; seed 000).

A 3-node cluster starts with ``CDC_GENERATIONS_V2`` disabled on every node (``--no-cdc-
generations-v2``: "old version" nodes), so its first generation is v1 (timestamp id, v1 tables);
CDC data is written in it, an admin request (``ringflow cluster new-cdc-generation``) makes a
second v1 generation, and more CDC data is written in that one. Then every node is restarted
with the feature (a rolling upgrade). Checked on every node: both v1 generations appear exactly
once in ``cdc_generation_timestamps`` with exactly their v1 streams in
``cdc_streams_descriptions_v2``; ``system.cdc_local`` has the ``'rewritten'`` row; every CDC log
row is found from the v2 tables (its stream belongs to the generation operating at its time);
and a generation requested after the upgrade is a v2 one. Then expiry (CDC TTL 1 s: superseded
generations marked ``expired``, their internal descriptions deleted) and a 4th node joining
(``ringflow cluster add``: a v2 generation, and the new node has ``'rewritten'`` from bootstrap).
"""

from __future__ import annotations

import calendar
import datetime
import time
from collections.abc import Iterator

import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import (
    LocalCluster,
    ringflow,
    started_cluster,
    wait_until,
)

pytestmark = pytest.mark.timeout(420)
ONE = ConsistencyLevel.ONE
QUORUM = ConsistencyLevel.QUORUM
KEYS = 12
GENERATIONS: dict[str, object] = {}
"""What the upgrade test created, for the expiry test that follows it."""


def _one(text: str) -> SimpleStatement:
    return SimpleStatement(text, consistency_level=ONE)


@pytest.fixture(scope="module")
def old_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("upgrade")
    with started_cluster(data, "--no-cdc-generations-v2", log_lines=8) as cluster:
        yield cluster


def _cdc_local(cluster: LocalCluster, address: str) -> dict[str, tuple[object, object]]:
    rows = cluster.session(only=address).execute(
        _one("SELECT key, streams_timestamp, uuid FROM system.cdc_local")
    )
    return {row.key: (row.streams_timestamp, row.uuid) for row in rows}


def _agreed_generation(cluster: LocalCluster, differs_from: object = None) -> object:
    """The generation timestamp every node persisted (once they agree, and it is new)."""
    seen: dict[str, object] = {}

    def agreed() -> bool:
        for address in cluster.addresses:
            seen[address] = _cdc_local(cluster, address).get("cdc_local")
        values = set(seen.values())
        return len(values) == 1 and None not in values and differs_from not in values

    wait_until(agreed, 90, "every node persisted the same (new) CDC generation")
    timestamp, generation_uuid = seen[cluster.addresses[0]]  # type: ignore[misc]
    return timestamp, generation_uuid


def _write(cluster: LocalCluster, keys: range) -> None:
    session = cluster.session()
    for key in keys:
        session.execute(
            SimpleStatement(
                f"INSERT INTO up.t (k, v) VALUES ({key}, {key})", consistency_level=QUORUM
            )
        )


def _wait_operating(timestamp: datetime.datetime) -> None:
    """Sleep until the generation starting at ``timestamp`` (naive UTC, as the driver gives
    it) operates."""
    start_s = calendar.timegm(timestamp.utctimetuple()) + timestamp.microsecond / 1e6
    while time.time() < start_s + 0.5:
        time.sleep(0.2)


def _v1_streams(cluster: LocalCluster, address: str) -> dict[object, set[bytes]]:
    rows = cluster.session(only=address).execute(
        _one("SELECT time, streams FROM system_distributed.cdc_streams_descriptions")
    )
    return {row.time: {bytes(blob) for blob in row.streams} for row in rows}


def test_v1_generations_are_rewritten_to_v2_once_after_the_upgrade(
    old_cluster: LocalCluster,
) -> None:
    cluster = old_cluster
    first, first_uuid = _agreed_generation(cluster)  # type: ignore[misc]
    assert first_uuid is None, "a cluster without CDC_GENERATIONS_V2 makes v1 generations"
    status = ringflow("cluster", "status", "--data", str(cluster.data))
    assert "v2;" not in status
    session = cluster.session()
    session.execute(
        "CREATE KEYSPACE up WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute("CREATE TABLE up.t (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}")
    assert session.wait_for_schema_agreement(wait_time=20)
    _write(cluster, range(KEYS))

    # a second v1 generation, through the admin request
    ringflow("cluster", "new-cdc-generation", cluster.addresses[1], "--data", str(cluster.data))
    second, second_uuid = _agreed_generation(cluster, differs_from=(first, None))  # type: ignore[misc]
    assert second_uuid is None and second > first
    _wait_operating(second)
    _write(cluster, range(100, 100 + KEYS))
    for address in cluster.addresses:
        wait_until(
            lambda a=address: set(_v1_streams(cluster, a)) == {first, second},
            30,
            f"both v1 generations in cdc_streams_descriptions on {address}",
        )
        times = cluster.session(only=address).execute(
            _one("SELECT time FROM system_distributed.cdc_generation_timestamps")
        )
        assert list(times) == [], "old-version nodes publish to the v1 table only"
        assert "rewritten" not in _cdc_local(cluster, address)
    v1 = _v1_streams(cluster, cluster.addresses[0])
    cluster.close_drivers()

    # rolling upgrade: each node restarted with the feature (the default)
    for address in cluster.addresses:
        cluster.kill(address)
        cluster.restart(address)
        cluster.wait_ready()

    for address in cluster.addresses:
        pinned = cluster.session(only=address)

        def rewritten(pinned: object = pinned) -> bool:
            times = pinned.execute(  # type: ignore[attr-defined]
                _one("SELECT time FROM system_distributed.cdc_generation_timestamps")
            )
            return sorted(row.time for row in times) == [first, second]

        wait_until(rewritten, 90, f"both v1 generations in the v2 timestamps table on {address}")
        wait_until(
            lambda a=address: "rewritten" in _cdc_local(cluster, a),
            60,
            f"'rewritten' marker on {address}",
        )
        ranges = pinned.execute(
            _one(
                "SELECT time, range_end, streams "
                "FROM system_distributed.cdc_streams_descriptions_v2"
            )
        )
        v2: dict[object, list[bytes]] = {}
        for row in ranges:
            v2.setdefault(row.time, []).extend(bytes(blob) for blob in row.streams)
        assert set(v2) == {first, second}
        for timestamp, streams in v2.items():
            assert len(streams) == len(set(streams)), "a stream listed twice"
            assert set(streams) == v1[timestamp], f"v2 streams of {timestamp} on {address}"

    # every CDC log row is found through the v2 tables: its stream is in the generation
    # operating at its time
    session = cluster.session()
    seen: dict[int, set[object]] = {}
    for row in session.execute(
        SimpleStatement(
            'SELECT "cdc$stream_id", "cdc$time", k FROM up.t_scylla_cdc_log',
            consistency_level=QUORUM,
        )
    ):
        stream = bytes(row[0])
        generation = first if stream in v1[first] else second if stream in v1[second] else None
        assert generation is not None, f"log row of key {row.k} in an unpublished stream"
        seen.setdefault(row.k, set()).add(generation)
    assert {k: g for k, g in seen.items() if k < 100} == {k: {first} for k in range(KEYS)}
    assert {k: g for k, g in seen.items() if k >= 100} == {
        k: {second} for k in range(100, 100 + KEYS)
    }

    # once every node supports the feature, a new generation is a v2 one
    ringflow("cluster", "new-cdc-generation", cluster.addresses[0], "--data", str(cluster.data))
    third, third_uuid = _agreed_generation(cluster, differs_from=(second, None))  # type: ignore[misc]
    assert third_uuid is not None
    GENERATIONS.update(first=first, second=second, third=third, third_uuid=third_uuid)


def test_superseded_generations_expire_after_the_cdc_ttl(old_cluster: LocalCluster) -> None:
    """With every CDC log TTL at 1 s, the generations superseded more than 1 s ago get
    ``expired`` (= successor's start + 1 s) and lose their internal description; the newest
    keeps both (issue 7 §3 "Expired generations")."""
    if not GENERATIONS:
        pytest.skip("needs the upgraded cluster of the test above")
    cluster = old_cluster
    first, second, third = GENERATIONS["first"], GENERATIONS["second"], GENERATIONS["third"]
    session = cluster.session()
    session.execute("ALTER TABLE up.t WITH cdc = {'enabled': true, 'ttl': 1}")
    assert session.wait_for_schema_agreement(wait_time=20)
    _wait_operating(third + datetime.timedelta(seconds=1))  # type: ignore[operator]
    second_ms = datetime.timedelta(seconds=1)
    expected = {first: second + second_ms, second: third + second_ms, third: None}  # type: ignore[operator]
    for address in cluster.addresses:
        pinned = cluster.session(only=address)

        def marked(pinned: object = pinned) -> bool:
            rows = pinned.execute(  # type: ignore[attr-defined]
                _one("SELECT time, expired FROM system_distributed.cdc_generation_timestamps")
            )
            return {row.time: row.expired for row in rows} == expected

        wait_until(marked, 90, f"superseded generations marked expired on {address}")
        v1_rows = pinned.execute(
            _one("SELECT time, expired FROM system_distributed.cdc_streams_descriptions")
        )
        assert {row.time: row.expired for row in v1_rows} == {
            first: expected[first],
            second: expected[second],
        }
    wait_until(
        lambda: (
            not list(
                cluster.session(only=cluster.addresses[0]).execute(
                    SimpleStatement(
                        "SELECT time FROM system_distributed.cdc_generation_descriptions",
                        consistency_level=QUORUM,
                    )
                )
            )
        ),
        60,
        "the expired v1 internal descriptions deleted",
    )
    internal = session.execute(
        _one(
            "SELECT range_end FROM system_distributed_everywhere.cdc_generation_descriptions_v2 "
            f"WHERE id = {GENERATIONS['third_uuid']}"
        )
    )
    assert list(internal), "the newest generation keeps its internal description"


def test_a_node_joining_the_upgraded_cluster_makes_a_v2_generation(
    old_cluster: LocalCluster,
) -> None:
    """Bootstrap after the upgrade (issue 7 §4 "Upgrade"): the new generation is v2, and the
    new node wrote ``'rewritten'`` at bootstrap, so it never rewrites (seed 000)."""
    if not GENERATIONS:
        pytest.skip("needs the upgraded cluster of the tests above")
    cluster = old_cluster
    before = (GENERATIONS["third"], GENERATIONS["third_uuid"])
    ringflow("cluster", "add", "--data", str(cluster.data), "--timeout", "150", timeout_s=200)
    prefix, last = cluster.addresses[-1].rsplit(".", 1)
    cluster.addresses.append(f"{prefix}.{int(last) + 1}")
    _, joined_uuid = _agreed_generation(cluster, differs_from=before)  # type: ignore[misc]
    assert joined_uuid is not None, "a generation made after the upgrade is v2"
    local = _cdc_local(cluster, cluster.addresses[-1])
    assert "rewritten" in local
