"""Range reads on a 3-node cluster whose RF is smaller than the node count (real processes,
through the Python driver).

A full-table SELECT and ``token(k) > ? AND token(k) <= ?`` scans through each node alone
return exactly every row / the rows of the range (paged), for RF 1 and RF 2; with one node down
and RF 2, a QUORUM range read that needs the dead node is Unavailable, one over replicas that
are all alive works, and ONE works everywhere.
"""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel, Unavailable
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement

from tests.integration.cluster.conftest import LocalCluster, wait_until

pytestmark = pytest.mark.timeout(300)
ALL = ConsistencyLevel.ALL
QUORUM = ConsistencyLevel.QUORUM
ONE = ConsistencyLevel.ONE
ROWS = 300
MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1
RANGES = [
    (MIN_TOKEN, -(2**62)),
    (-(2**62), 0),
    (0, 2**62),
    (2**62, MAX_TOKEN),
    (-(2**61), -(2**61) + 2**59),
]


def _statement(text: str, level: int, fetch_size: int = 37) -> SimpleStatement:
    return SimpleStatement(text, consistency_level=level, fetch_size=fetch_size)


@pytest.fixture(scope="module")
def keyspaces(local_cluster: LocalCluster) -> dict[str, int]:
    session = local_cluster.session()
    for name, factor in (("rr1", 1), ("rr2", 2)):
        session.execute(
            f"CREATE KEYSPACE {name} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {factor}}}"
        )
        session.execute(f"CREATE TABLE {name}.t (k int PRIMARY KEY, v text)")
    assert session.wait_for_schema_agreement(wait_time=20)
    for name, level in (("rr1", ALL), ("rr2", QUORUM)):
        insert = session.prepare(f"INSERT INTO {name}.t (k, v) VALUES (?, ?)")
        insert.consistency_level = level
        for key in range(ROWS):
            session.execute(insert, (key, f"v{key}"))
    return {"rr1": ONE, "rr2": QUORUM}


def _tokens(local_cluster: LocalCluster, keyspace: str) -> dict[int, int]:
    session = local_cluster.session(only=local_cluster.addresses[0])
    rows = session.execute(_statement(f"SELECT k, token(k) FROM {keyspace}.t", ONE))
    return {row[0]: row[1] for row in rows}


def test_full_scans_through_each_node_return_every_row(
    local_cluster: LocalCluster, keyspaces: dict[str, int]
) -> None:
    for keyspace, level in keyspaces.items():
        for address in local_cluster.addresses:
            session = local_cluster.session(only=address)
            rows = list(session.execute(_statement(f"SELECT * FROM {keyspace}.t", level)))
            assert sorted(row.k for row in rows) == list(range(ROWS)), (keyspace, address)
            assert all(row.v == f"v{row.k}" for row in rows)
            count = session.execute(_statement(f"SELECT count(*) FROM {keyspace}.t", level)).one()
            assert count[0] == ROWS, (keyspace, address)


def test_token_range_scans_through_each_node_return_the_rows_of_the_range(
    local_cluster: LocalCluster, keyspaces: dict[str, int]
) -> None:
    for keyspace, level in keyspaces.items():
        tokens = _tokens(local_cluster, keyspace)
        assert sorted(tokens) == list(range(ROWS))
        for address in local_cluster.addresses:
            session = local_cluster.session(only=address)
            query = session.prepare(
                f"SELECT k, token(k) FROM {keyspace}.t WHERE token(k) > ? AND token(k) <= ?"
            )
            query.consistency_level = level
            query.fetch_size = 23
            for low, high in RANGES:
                rows = list(session.execute(query, (low, high)))
                expected = sorted(k for k, token in tokens.items() if low < token <= high)
                assert sorted(row[0] for row in rows) == expected, (keyspace, address, low, high)
                found = [row[1] for row in rows]
                assert found == sorted(found), "range rows come in token order"


def test_a_range_read_of_more_cells_than_a_store_batch_holds(
    local_cluster: LocalCluster, keyspaces: dict[str, int]
) -> None:
    """A coordinated range read whose chunk holds more than the store's ``max_batch_cells``
    (100,000) answers every row; it failed with "batch of more than ... cells" whatever the page
    size (the chunk was copied into the coordinator's scratch store in one batch)."""
    session = local_cluster.session()
    columns = [f"v{i}" for i in range(60)]
    session.execute(
        f"CREATE TABLE rr2.wide (k int, c int, {', '.join(f'{c} int' for c in columns)}, "
        "PRIMARY KEY (k, c))"
    )
    assert session.wait_for_schema_agreement(wait_time=20)
    insert = session.prepare(
        f"INSERT INTO rr2.wide (k, c, {', '.join(columns)}) "
        f"VALUES (?, ?, {', '.join('?' for _ in columns)})"
    )
    insert.consistency_level = ALL
    rows = [(k, c, *range(60)) for k in range(200) for c in range(11)]
    execute_concurrent_with_args(session, insert, rows, concurrency=32, raise_on_first_error=True)
    for address in local_cluster.addresses:
        one = local_cluster.session(only=address)
        found = list(one.execute(_statement("SELECT k, c, v59 FROM rr2.wide", QUORUM, 5000)))
        assert len(found) == len(rows) and {row.v59 for row in found} == {59}, address


def _vnode_ranges(local_cluster: LocalCluster) -> list[tuple[int, int, set[str]]]:
    """Every ring range ``(previous token, token]`` of rr2 and its replicas' addresses."""
    session = local_cluster.session()
    token_map = session.cluster.metadata.token_map
    assert token_map is not None
    ring = sorted(token_map.ring, key=lambda token: token.value)
    ranges = []
    for previous, token in zip([ring[-1], *ring[:-1]], ring, strict=True):
        if previous.value >= token.value:
            continue  # the wrapping range: not needed here
        replicas = {host.address for host in token_map.get_replicas("rr2", token)}
        ranges.append((previous.value, token.value, replicas))
    return ranges


def test_one_node_down_rf2_quorum_range_reads_unavailable_where_needed_one_works(
    local_cluster: LocalCluster, keyspaces: dict[str, int]
) -> None:
    first, _, third = local_cluster.addresses
    tokens = _tokens(local_cluster, "rr2")
    ranges = _vnode_ranges(local_cluster)
    session = local_cluster.session(only=first)
    query = session.prepare("SELECT k FROM rr2.t WHERE token(k) > ? AND token(k) <= ?")
    local_cluster.kill(third)
    try:
        caught: list[Unavailable] = []

        def refused() -> bool:
            try:  # every page: the first alone may hold only ranges the live nodes serve
                list(session.execute(_statement("SELECT * FROM rr2.t", QUORUM)))
            except Unavailable as error:
                caught.append(error)
                return True
            return False

        wait_until(refused, 40, "QUORUM full scan refused once a replica is convicted")
        error = caught[-1]
        assert (error.consistency, error.required_replicas, error.alive_replicas) == (QUORUM, 2, 1)
        rows = list(session.execute(_statement("SELECT * FROM rr2.t", ONE)))
        assert sorted(row.k for row in rows) == list(range(ROWS))
        served = [(low, high) for low, high, replicas in ranges if third not in replicas]
        needing = [(low, high) for low, high, replicas in ranges if third in replicas]
        assert served and needing
        for low, high in served:
            query.consistency_level = QUORUM
            rows = list(session.execute(query, (low, high)))
            expected = sorted(k for k, token in tokens.items() if low < token <= high)
            assert sorted(row.k for row in rows) == expected
        for low, high in needing[:3]:
            query.consistency_level = QUORUM
            with pytest.raises(Unavailable):
                session.execute(query, (low, high))
            query.consistency_level = ONE
            rows = list(session.execute(query, (low, high)))
            expected = sorted(k for k, token in tokens.items() if low < token <= high)
            assert sorted(row.k for row in rows) == expected
    finally:
        local_cluster.restart(third)
        local_cluster.wait_ready()
