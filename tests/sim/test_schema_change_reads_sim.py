"""QUORUM reads racing a schema change, in ``ringflow.sim`` (issue 15 §3: the server-side cause
of the read timeouts during ``ALTER TABLE ... DROP``).

Three simulated nodes run the real ``ClusterNode`` over real stores (``test_cluster_sim``'s
set-up), with ``ks.wide (k int PRIMARY KEY, v int, w int)`` agreed and written at QUORUM. Then
node n1 runs a DDL and does not announce it (its peers keep the old schema, as they do for the
moment a push takes in a real cluster), and partitions are read at QUORUM, each read naming
its coordinator's columns as the CQL data plane does:

* ``DROP w`` on n1: reads through n1 (which no longer has ``w``) and through n2 (which still
  has it) all answer, with the coordinator's columns: ``w``'s values through n2, none through
  n1. Before the fix the replicas that still had ``w`` sent it, the digests disagreed, and the
  read repair of ``w`` sent to n1 was refused ("no regular column 'w'"): the read waited for
  that ack until it timed out ("received only 0 responses", 1 required, at QUORUM).
* ``ADD x`` on n1, written through n1 (the peers refuse the write, so only n1 holds it): reads
  through n1 answer with n1's ``x`` (the repair of ``x`` to peers that do not know it is left
  out instead of refused, and waited for).
* Announced, the cluster agrees and every node reads the same values.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest

from ringflow.cluster._messages import Verb
from ringflow.cluster._read_path import ReadKind
from ringflow.cluster.service import BuiltNode
from ringflow.cluster.service._codec import decode_read_response
from ringflow.cluster.service._node import ClusterNode
from ringflow.cql._executor import SessionState
from ringflow.cql._requests import Query, QueryParameters
from ringflow.cql._wire import Consistency
from ringflow.runtime import Runtime
from ringflow.schema import Cell, Mutation, Row
from ringflow.sim import Simulation
from tests.sim._harness import (
    KEYSPACE_RF3,
    NAMES,
    QUORUM,
    all_alive,
    built_node,
    ddl,
    endpoint,
    kv_key,
    open_store,
    sim_host,
    start_layout_node,
)

pytestmark = pytest.mark.timeout(120)
_NAMESPACE = uuid.UUID("3b7e1c0a-9d2f-4e61-8a5b-2c4d6e8f0a13")
KEYS = range(12)


def _int(value: int) -> bytes:
    return struct.pack(">i", value)


def _value(partition: Mutation | None, column: str) -> int | None:
    if partition is None or not partition.rows:
        return None
    cell = partition.rows[0].cells.get(column)
    if not isinstance(cell, Cell) or not cell.value:
        return None
    found: int = struct.unpack(">i", cell.value)[0]
    return found


class Cluster:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.nodes: dict[str, ClusterNode] = {}

    def factory(self, name: str) -> Callable[[Runtime], BuiltNode]:
        host = sim_host(_NAMESPACE, name, endpoint(name))

        def make(runtime: Runtime) -> BuiltNode:
            built, _cdc = start_layout_node(runtime, name, host, open_store(runtime))
            self.nodes[name] = built.cluster
            return built

        return make

    def columns(self, name: str) -> tuple[str, ...]:
        table = self.nodes[name].processor.schema.tables[("ks", "wide")]
        return tuple(c.name for c in table.regular_columns)

    def agreed(self) -> bool:
        return len({node.processor.schema_version for node in self.nodes.values()}) == 1

    def write(self, through: str, key: int, cells: dict[str, int]) -> BaseException | None:
        """A QUORUM write through ``through``; its error (None: acknowledged)."""
        node = self.nodes[through]
        now_us = node.clock.now_us()
        row = Row((), cells={c: Cell.live(now_us, _int(v)) for c, v in cells.items()})
        outcome: list[BaseException | None] = []
        node.write([Mutation("ks", "wide", kv_key(key), rows=(row,))], {}, QUORUM, outcome.append)
        assert self.sim.run_until_true(lambda: bool(outcome), timeout_ms=30_000)
        return outcome[0]

    def read(self, through: str) -> dict[int, Mutation | None]:
        """Every key read at QUORUM through ``through`` with its columns; no read may fail."""
        node, columns = self.nodes[through], self.columns(through)
        answers: dict[int, Mutation | None] = {}
        errors: list[BaseException] = []
        for key in KEYS:

            def got(found: Mutation | None, error: BaseException | None, key: int = key) -> None:
                if error is not None:
                    errors.append(error)
                answers[key] = found

            node.read("ks", "wide", kv_key(key), QUORUM, got, columns=columns)
        assert self.sim.run_until_true(lambda: len(answers) == len(KEYS), timeout_ms=60_000)
        assert not errors, f"reads through {through} with columns {columns} failed: {errors[:3]}"
        return answers


def _unannounced(node: ClusterNode, text: str) -> None:
    """``text`` applied on ``node`` alone: its peers keep the old schema until it announces
    (run by its processor, not through the statement backend that announces a change, as by
    a crash right after the change)."""
    query = Query(text, QueryParameters(Consistency.ONE))
    response = node.processor.query(query, SessionState())
    assert "Error" not in type(response).__name__, response


def _booted(sim: Simulation) -> Cluster:
    """The three nodes up, agreed on ``ks.wide (k int PRIMARY KEY, v int, w int)`` at RF 3."""
    cluster = Cluster(sim)
    for name in NAMES:
        sim.add_process(name, cluster.factory(name))
    assert sim.run_until_true(lambda: all_alive(cluster.nodes, NAMES, endpoint), timeout_ms=60_000)
    ddl(built_node(sim, "n1"), KEYSPACE_RF3)
    ddl(built_node(sim, "n1"), "CREATE TABLE ks.wide (k int PRIMARY KEY, v int, w int)")
    assert sim.run_until_true(cluster.agreed, timeout_ms=60_000)
    return cluster


def test_quorum_reads_answer_while_a_drop_or_an_add_has_reached_one_node_only() -> None:
    with Simulation(15) as sim:
        cluster = _booted(sim)
        for key in KEYS:
            assert cluster.write("n2", key, {"v": key, "w": 100 + key}) is None

        _unannounced(cluster.nodes["n1"], "ALTER TABLE ks.wide DROP w")
        assert cluster.columns("n1") == ("v",) and cluster.columns("n2") == ("v", "w")
        through_n1 = cluster.read("n1")
        assert {k: (_value(p, "v"), _value(p, "w")) for k, p in through_n1.items()} == {
            k: (k, None) for k in KEYS
        }
        through_n2 = cluster.read("n2")
        assert {k: (_value(p, "v"), _value(p, "w")) for k, p in through_n2.items()} == {
            k: (k, 100 + k) for k in KEYS
        }

        _unannounced(cluster.nodes["n1"], "ALTER TABLE ks.wide ADD x int")
        for key in KEYS:  # n2 and n3 refuse the unknown column: only n1 holds x
            assert cluster.write("n1", key, {"x": 200 + key}) is not None
        through_n1 = cluster.read("n1")
        assert {k: (_value(p, "v"), _value(p, "x")) for k, p in through_n1.items()} == {
            k: (k, 200 + k) for k in KEYS
        }

        cluster.nodes["n1"].on_local_schema_change()
        assert sim.run_until_true(cluster.agreed, timeout_ms=60_000)
        answers = {name: cluster.read(name) for name in NAMES}
        for name in NAMES:
            assert cluster.columns(name) == ("v", "x")
            assert {k: (_value(p, "v"), _value(p, "x")) for k, p in answers[name].items()} == {
                k: (k, 200 + k) for k in KEYS
            }


def test_a_read_repair_reaching_a_replica_that_dropped_the_column_since_it_answered() -> None:
    """The race left after the fix above: a replica answers a read with ``w`` (it still has
    it), the DROP reaches it, then the read repair reconciled from its answer arrives with
    ``w``'s cells. Cassandra's replica takes such a mutation and never shows the dropped
    column's cells; ours refused it ("no regular column 'w'") and the QUORUM read waited for
    the ack until it timed out (the flaky 3-node test of issue 15 §3: "received 0, required 1"
    in the repair phase). Each peer here drops ``w`` right after it sends a full-data answer."""
    with Simulation(16) as sim:
        cluster = _booted(sim)
        for key in KEYS:
            assert cluster.write("n1", key, {"v": key}) is None
        n1 = cluster.nodes["n1"]
        for key in KEYS:  # w on n1 only: every read through n1 repairs its other contact
            cell = Cell.live(n1.clock.now_us(), _int(100 + key))
            only_w = Mutation("ks", "wide", kv_key(key), rows=(Row((), cells={"w": cell}),))
            n1.store.apply([only_w], now_s=n1.clock.now_ms() // 1000)
        dropped: list[str] = []
        for name in ("n2", "n3"):
            _drop_after_full_data_answer(cluster.nodes[name], name, dropped)

        through_n1 = cluster.read("n1")  # no read may fail (Cluster.read)
        assert dropped, "no peer answered with full data: the read repaired nothing"
        assert {k: (_value(p, "v"), _value(p, "w")) for k, p in through_n1.items()} == {
            k: (k, 100 + k) for k in KEYS
        }
        for name in dropped:
            assert cluster.columns(name) == ("v",)


def _drop_after_full_data_answer(node: ClusterNode, name: str, dropped: list[str]) -> None:
    """``node`` applies ``ALTER TABLE ks.wide DROP w`` (unannounced) right after it sends its
    first full-data READ_RSP, before the read repair that answer leads to can reach it."""
    send = node.messenger.send

    def send_then_drop(to: str, verb: Verb, request_id: int, payload: bytes) -> bool:
        sent = send(to, verb, request_id, payload)
        full_data = verb == Verb.READ_RSP and decode_read_response(payload)[0] is ReadKind.DATA
        if full_data and name not in dropped:
            dropped.append(name)
            _unannounced(node, "ALTER TABLE ks.wide DROP w")
        return sent

    node.messenger.send = send_then_drop  # type: ignore[method-assign]
