"""A statement's data-plane write runs outside the processor's lock (a cluster node's statements
go on while one write waits for its replicas).

The data plane here is a real ``LocalDataPlane`` behind a gate the test opens: the first write
stops at the gate (as a coordinated write waits for acks). Checks: while it waits, other
statements on other threads run to completion (a read, another write, a prepare); the waiting
write lands once the gate opens; a failure of the deferred write still becomes the error its code
says (WriteTimeout with its fields), and a refused statement never reaches the plane.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ringflow.cdc._log_rows import CdcCapture
from ringflow.cql._error_responses import WriteTimeoutResponse
from ringflow.cql._executor import LocalDataPlane
from ringflow.errors import Consistency, WriteTimeout, WriteType
from ringflow.schema import Mutation
from ringflow.storage import Store
from tests.unit.cql._exec_harness import ExecNode, node_with_keyspace

WAIT_S = 30.0


class GatedPlane(LocalDataPlane):
    """Writes to partition ``gated_key`` wait until ``gate`` is set."""

    def __init__(self, store: Store, gated_key: bytes) -> None:
        super().__init__(store)
        self.gated_key = gated_key
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.writes = 0

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        self.writes += 1
        if batch[0].partition_key == (self.gated_key,):
            self.waiting.set()
            assert self.gate.wait(WAIT_S)
        super().write(batch, captures, consistency, now_us)


def _node(tmp_path: Path) -> tuple[ExecNode, GatedPlane]:
    node = node_with_keyspace(tmp_path)
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v text)")
    plane = GatedPlane(node.store, b"\x00\x00\x00\x01")
    node.processor.use_data_plane(plane)
    return node, plane


def test_statements_run_while_a_write_waits_for_its_data_plane(tmp_path: Path) -> None:
    node, plane = _node(tmp_path)
    results: dict[str, Any] = {}
    waiting = threading.Thread(
        target=lambda: results.update(first=node.q("INSERT INTO t (k, v) VALUES (1, 'one')"))
    )
    waiting.start()
    try:
        assert plane.waiting.wait(WAIT_S)
        node.ok("INSERT INTO t (k, v) VALUES (2, 'two')")  # the lock is free
        assert node.ok("SELECT k, v FROM t WHERE k = 2") == [(2, "two")]
        assert node.ok("SELECT k, v FROM t WHERE k = 1") == []  # still at the gate
        assert node.prepare("SELECT v FROM t WHERE k = ?").statement_id
        assert waiting.is_alive()
    finally:
        plane.gate.set()
        waiting.join(WAIT_S)
    assert not waiting.is_alive() and "first" in results
    assert node.ok("SELECT k, v FROM t WHERE k = 1") == [(1, "one")]
    node.close()


def test_a_deferred_write_timeout_is_answered_as_one(tmp_path: Path) -> None:
    node, plane = _node(tmp_path)

    def timed_out(*args: object, **kwargs: object) -> None:
        raise WriteTimeout(Consistency.QUORUM, 1, 2, WriteType.SIMPLE)

    plane.write = timed_out  # type: ignore[method-assign]
    response = node.raw("INSERT INTO t (k, v) VALUES (3, 'x')", consistency=Consistency.QUORUM)
    assert isinstance(response, WriteTimeoutResponse)
    assert (response.received, response.block_for, response.write_type) == (1, 2, "SIMPLE")
    assert node.processor.internal_errors == 0
    node.close()


def test_a_refused_statement_never_reaches_the_data_plane(tmp_path: Path) -> None:
    node, plane = _node(tmp_path)
    assert node.error("INSERT INTO t (k, v) VALUES ('not an int', 'x')").code == 0x2200
    assert node.error("INSERT INTO missing (k) VALUES (1)").code == 0x2200
    assert plane.writes == 0
    node.ok("INSERT INTO t (k, v) VALUES (4, 'x')")
    assert plane.writes == 1
    node.close()
