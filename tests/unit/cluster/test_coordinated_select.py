"""A cluster node's SELECT without a thread waiting (``ClusterDataPlane.submit_read``): the real
processor and plane, a coordinator that answers slice reads from another store on a real event
loop. The answer must be the one the replicas' store gives to the same statement; the slices a
run lacks are read together in one round; a page resumed inside a slice held costs no read; a
coordinator error fails the statement with that error."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service import _plane
from ringflow.cluster.service._plane import ClusterDataPlane
from ringflow.cql._results import RowsResult
from ringflow.cql._wire import Consistency
from ringflow.errors import ReadTimeout
from ringflow.schema import ClusteringBound, Mutation
from ringflow.storage import ResultTooLarge, mutation_size
from tests.unit.cql._exec_harness import ExecNode, decode_rows

TIMEOUT_S = 10.0
SCHEMA = (
    "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}",
    "CREATE TABLE ks.t (k int, c int, v text, PRIMARY KEY (k, c))",
)


@dataclass
class _Settings:
    read_timeout_ms: int = 5000
    range_timeout_ms: int = 10000
    write_timeout_ms: int = 5000


@dataclass
class _Coordinator:
    """What the plane needs of a ``ClusterNode``: slice reads, answered on the event loop from
    ``source`` (the replicas' reconciled state), each call recorded."""

    source: ExecNode
    processor: Any
    loop: asyncio.AbstractEventLoop
    settings: _Settings = field(default_factory=_Settings)
    calls: list[tuple[bytes, ...]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    """How many reads had been started when each answer arrived."""
    failing: BaseException | None = None
    range_calls: int = 0

    def read(
        self,
        keyspace: str,
        table: str,
        partition_key: tuple[bytes, ...],
        consistency: Consistency,
        done: Any,
        start: ClusteringBound,
        end: ClusteringBound,
        columns: tuple[str, ...] | None,
    ) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self.calls.append(partition_key)
        found = self.source.store.read_mutation(
            (keyspace, table), partition_key, start=start, end=end
        )

        def answer(found: Mutation | None = found) -> None:
            self.answered.append(len(self.calls))
            if self.failing is not None:
                done(None, self.failing)
            else:
                done(found, None)

        self.loop.call_soon(answer)

    def read_range(
        self,
        keyspace: str,
        table: str,
        left: int,
        right: int,
        consistency: Consistency,
        limit: int,
        done: Any,
    ) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self.range_calls += 1
        found = self.source.processor.schema.tables[(keyspace, table)]
        page = self.source.store.scan_mutations(found, left, right, page_size=limit)
        covered = None
        if page.paging_state is not None and page.mutations:
            covered = base_token(page.mutations[-1])
            covered = None if covered == right else covered
        self.loop.call_soon(done, page.mutations, covered, None)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[ExecNode, ExecNode, _Coordinator]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    statements = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="statements")
    (tmp_path / "source").mkdir()
    (tmp_path / "local").mkdir()
    source = ExecNode(tmp_path / "source", with_cdc=False)
    local = ExecNode(tmp_path / "local", with_cdc=False)
    for text in SCHEMA:
        source.ok(text)
        local.ok(text)
    for k in range(6):
        for c in range(10):
            source.ok(f"INSERT INTO ks.t (k, c, v) VALUES ({k}, {c}, 'k{k}c{c}')")
    coordinator = _Coordinator(source, local.processor, loop)
    plane = ClusterDataPlane(coordinator, loop, local.store, statements)  # type: ignore[arg-type]
    local.processor.use_data_plane(plane, plane.submit, plane.submit_read)
    yield source, local, coordinator
    statements.shutdown(wait=True)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(TIMEOUT_S)
    loop.close()
    source.close()
    local.close()


def _select(node: ExecNode, text: str, **options: Any) -> RowsResult:
    """Run a SELECT on ``node``'s plane at QUORUM; its answer, from its pending future."""
    response = node.raw(text, consistency=Consistency.QUORUM, **options)
    pending = node.processor.take_pending()
    assert pending is not None, "a cluster SELECT leaves its answer pending"
    future, _ = pending
    answer = future.result(TIMEOUT_S)
    assert isinstance(answer, RowsResult), (response, answer)
    return answer


def _no_waiting(*_args: object) -> None:
    raise AssertionError("a statement thread waited for a coordinated read")


def test_an_in_select_reads_every_partition_in_one_round_and_answers_as_the_replicas(
    nodes: tuple[ExecNode, ExecNode, _Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, local, coordinator = nodes
    monkeypatch.setattr(ClusterDataPlane, "read_partition", _no_waiting)
    text = "SELECT k, c, v FROM ks.t WHERE k IN (1, 3, 4) AND c >= 2 AND c < 8"
    got = decode_rows(_select(local, text))
    assert got == source.q(text)
    assert len(got) == 18
    assert len(coordinator.calls) == 3
    assert coordinator.answered[0] == 3, "all three reads start before the first answer"


def test_a_filtered_read_resumed_inside_its_slice_reads_it_once(
    nodes: tuple[ExecNode, ExecNode, _Coordinator],
) -> None:
    source, local, coordinator = nodes
    text = "SELECT c, v FROM ks.t WHERE k = 2 AND v = 'k2c9' ALLOW FILTERING"
    # two rows a batch: the filter drops them, so the partition is read on and on, resumed
    got = decode_rows(_select(local, text, page_size=2))
    assert got == source.q(text) == [(9, "k2c9")]
    assert len(coordinator.calls) == 1


def test_paging_through_a_partition_answers_each_page_as_the_replicas(
    nodes: tuple[ExecNode, ExecNode, _Coordinator],
) -> None:
    _, local, _ = nodes
    text = "SELECT c FROM ks.t WHERE k = 5"
    state: bytes | None = None
    pages = []
    for _ in range(10):
        answer = _select(local, text, page_size=4, paging_state=state)
        pages.append([row[0] for row in decode_rows(answer)])
        state = answer.metadata.paging_state
        if state is None:
            break
    assert pages == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_coordinator_error_fails_the_select_with_it(
    nodes: tuple[ExecNode, ExecNode, _Coordinator],
) -> None:
    _, local, coordinator = nodes
    coordinator.failing = ReadTimeout(Consistency.QUORUM, 1, 2, False)
    local.raw("SELECT * FROM ks.t WHERE k = 1", consistency=Consistency.QUORUM)
    pending = local.processor.take_pending()
    assert pending is not None
    with pytest.raises(ReadTimeout):
        pending[0].result(TIMEOUT_S)


def test_its_last_run_a_select_reads_on_its_thread(
    nodes: tuple[ExecNode, ExecNode, _Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, local, coordinator = nodes
    monkeypatch.setattr(_plane, "MAX_SELECT_RUNS", 1)
    text = "SELECT k, c FROM ks.t WHERE k IN (0, 5)"
    assert decode_rows(_select(local, text)) == source.q(text)
    assert len(coordinator.calls) == 2
    assert coordinator.answered == [1, 2], "one at a time, the statement's thread waiting"


def test_a_scan_pages_chunk_by_chunk_with_its_range_reads_on_the_loop(
    nodes: tuple[ExecNode, ExecNode, _Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, local, coordinator = nodes
    monkeypatch.setattr(ClusterDataPlane, "read_range", _no_waiting)
    monkeypatch.setattr(_plane, "RANGE_CHUNK_PARTITIONS", 2)
    monkeypatch.setattr(_plane, "MIN_RANGE_CHUNK_PARTITIONS", 2)
    text = "SELECT k, c, v FROM ks.t"
    got = []
    state: bytes | None = None
    for _ in range(100):  # every page its own statement
        answer = _select(local, text, page_size=7, paging_state=state)
        rows = decode_rows(answer)
        assert len(rows) <= 7
        got.extend(rows)
        state = answer.metadata.paging_state
        if state is None:
            break
    assert got == source.q(text)
    assert len(got) == 60
    assert coordinator.range_calls >= 3, "six partitions, two a chunk"


def test_a_select_holding_more_than_its_byte_limit_is_refused(
    nodes: tuple[ExecNode, ExecNode, _Coordinator],
) -> None:
    """``StoreLimits.max_held_read_bytes`` bounds what one statement holds of the partitions
    it read: one partition fits, two at once do not, and the refusal says why."""
    source, local, _coordinator = nodes
    one = source.store.read_mutation(("ks", "t"), (struct.pack(">i", 0),))
    assert one is not None
    limit = mutation_size(one).size_bytes + 1
    local.store.limits = dataclasses.replace(local.store.limits, max_held_read_bytes=limit)
    assert len(decode_rows(_select(local, "SELECT * FROM ks.t WHERE k = 0"))) == 10
    local.raw("SELECT * FROM ks.t WHERE k IN (0, 1)", consistency=Consistency.QUORUM)
    pending = local.processor.take_pending()
    assert pending is not None
    with pytest.raises(ResultTooLarge, match="max_held_read_bytes"):
        pending[0].result(TIMEOUT_S)
