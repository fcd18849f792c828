"""A cluster node's statement path over a fake coordinator (shared by the coordinated SELECT
and auth tests): the real processor and ``ClusterDataPlane``, a coordinator that answers slice
and range reads (and applies writes) from another store, the replicas' reconciled state, on a
real event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringflow.cdc import CdcCapture
from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service._plane import ClusterDataPlane
from ringflow.cql._results import RowsResult
from ringflow.cql._wire import Consistency
from ringflow.schema import ClusteringBound, Mutation
from tests.unit.cql._exec_harness import ExecNode

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
class Coordinator:
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
    delay_s: float = 0.0
    """How long a slice read takes to answer."""
    writes: int = 0

    def write(
        self,
        batch: list[Mutation],
        captures: dict[int, CdcCapture],
        consistency: Consistency,
        done: Any,
    ) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self.writes += 1
        error = self.failing
        if error is None:
            self.source.store.apply(batch, now_s=self.source.clock() // 1_000_000, cdc=captures)
        self.loop.call_soon(done, error)

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

        self.loop.call_later(self.delay_s, answer)

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
        found = next(
            t for t in self.source.store.tables() if (t.keyspace, t.name) == (keyspace, table)
        )
        page = self.source.store.scan_mutations(found, left, right, page_size=limit)
        covered = None
        if page.paging_state is not None and page.mutations:
            covered = base_token(page.mutations[-1])
            covered = None if covered == right else covered
        self.loop.call_soon(done, page.mutations, covered, None)


def coordinated_nodes(tmp_path: Path) -> Iterator[tuple[ExecNode, ExecNode, Coordinator]]:
    """A source node (the replicas), a local node whose processor reads and writes through a
    ``ClusterDataPlane`` over a ``Coordinator`` of the source, and that coordinator."""
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
    coordinator = Coordinator(source, local.processor, loop)
    plane = ClusterDataPlane(coordinator, loop, local.store, statements)  # type: ignore[arg-type]
    local.processor.use_data_plane(plane, plane.submit, plane.submit_read)
    yield source, local, coordinator
    statements.shutdown(wait=True)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(TIMEOUT_S)
    loop.close()
    source.close()
    local.close()


def select(node: ExecNode, text: str, **options: Any) -> RowsResult:
    """Run a SELECT on ``node``'s plane at QUORUM; its answer, from its pending future."""
    response = node.raw(text, consistency=Consistency.QUORUM, **options)
    pending = node.processor.take_pending()
    assert pending is not None, "a cluster SELECT leaves its answer pending"
    future, _ = pending
    answer = future.result(TIMEOUT_S)
    assert isinstance(answer, RowsResult), (response, answer)
    return answer
