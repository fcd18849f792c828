"""The cluster data plane: a statement's writes and reads routed through the node's coordinator.

``QueryProcessor`` runs statements on a statement thread and calls its ``DataPlane``
(``ringflow.cql._executor``). This plane hands each write or partition read to the
``ClusterNode`` on the event loop (``call_soon_threadsafe``) and blocks the statement thread on a
``concurrent.futures.Future`` until the coordinator answers (bounded: the coordinator's own
timeout plus a margin). Store work of the node runs on other threads, so a blocked statement
never holds up the replica verbs it waits for.

Reads: ``reader`` returns a ``CoordinatedReadStore``, a scratch ``Store`` (a file of its own in
the data directory) whose ``read_partition`` first reads the partition through the coordinator
(data + digests at the statement's level, blocking read repair), writes the reconciled raw
partition into the scratch store, then answers from it with the storage layer's own slicing,
paging and reconciliation. Only user keyspaces are coordinated; ``system*`` keyspaces are read
and written locally (each node keeps its own ``system.local``/``system.peers``). Range scans
read the local store only (a documented limit: with RF equal to the node count the local store
holds every partition).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ringflow.cdc import CdcCapture
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._settings import ReadDone, WriteDone
from ringflow.cql import Consistency
from ringflow.errors import InternalError
from ringflow.schema import ClusteringBound, Mutation, Table
from ringflow.storage import ResultRow, ScanPage, Store

_MARGIN_S = 2.0
_NO_BOUND = ClusteringBound()


def _wait(future: concurrent.futures.Future[object], timeout_s: float, what: str) -> object:
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        raise InternalError(f"{what}: the coordinator did not answer in {timeout_s} s") from None


class ClusterDataPlane:
    """``DataPlane`` of a cluster node (see the module docstring)."""

    def __init__(
        self,
        node: ClusterNode,
        loop: asyncio.AbstractEventLoop,
        local: Store,
        scratch_path: Path,
    ) -> None:
        self._node = node
        self._loop = loop
        self._local = local
        self._reader = CoordinatedReadStore(scratch_path, self, local)

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        if not any(self.coordinated(m.keyspace) for m in batch):
            self._local.apply(batch, now_s=now_us // 1_000_000, cdc=dict(captures))
            return
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def done(error: BaseException | None) -> None:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        start: Callable[[WriteDone], None] = lambda callback: self._node.write(  # noqa: E731
            list(batch), dict(captures), consistency, callback
        )
        self._loop.call_soon_threadsafe(start, done)
        timeout_s = self._node.settings.write_timeout_ms / 1000 + _MARGIN_S
        _wait(future, timeout_s, "write")

    def coordinated(self, keyspace: str) -> bool:
        """User keyspaces are replicated; ``system*`` keyspaces are node-local here."""
        return keyspace in self._node.processor.schema.keyspaces

    def read_partition(
        self, table: Table, partition_key: tuple[bytes, ...], consistency: Consistency
    ) -> Mutation | None:
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def done(partition: Mutation | None, error: BaseException | None) -> None:
            if error is None:
                future.set_result(partition)
            else:
                future.set_exception(error)

        def start(callback: ReadDone) -> None:
            self._node.read(table.keyspace, table.name, partition_key, consistency, callback)

        self._loop.call_soon_threadsafe(start, done)
        timeout_s = self._node.settings.read_timeout_ms / 1000 + _MARGIN_S
        result = _wait(future, timeout_s, "read")
        return result if isinstance(result, Mutation) else None

    def reader(self, consistency: Consistency) -> Store:
        self._reader.begin(consistency)
        return self._reader

    def close(self) -> None:
        self._reader.close()


class CoordinatedReadStore(Store):
    """A scratch store filled, partition by partition, by coordinated reads (module docstring).

    Used by one statement at a time (the processor's lock); ``begin`` starts a statement.
    """

    def __init__(self, path: Path, plane: ClusterDataPlane, local: Store) -> None:
        super().__init__(path, synchronous="NORMAL", limits=local.limits)
        self._plane = plane
        self._local = local
        self._consistency = Consistency.ONE
        self._fetched: set[tuple[str, str, tuple[bytes, ...]]] = set()
        self._cleared: set[tuple[str, str]] = set()
        self._owner = threading.Lock()

    def begin(self, consistency: Consistency) -> None:
        self._consistency = consistency
        self._fetched.clear()
        self._cleared.clear()

    def _prepare_table(self, table: Table) -> None:
        key = (table.keyspace, table.name)
        if key in self._cleared:
            return
        try:
            known = self.table(*key)
        except Exception:
            known = None
        if known is not None:
            self.drop_table(*key)
        self.register_table(table)
        self._cleared.add(key)

    def read_partition(
        self,
        table: Table | tuple[str, str],
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
        columns: Sequence[str] | None = None,
        reverse: bool = False,
        limit: int | None = None,
        now_s: int,
    ) -> list[ResultRow]:
        if not isinstance(table, Table):
            table = self._local.table(*table)
        if not self._plane.coordinated(table.keyspace):
            return self._local.read_partition(
                table,
                partition_key,
                start=start,
                end=end,
                columns=columns,
                reverse=reverse,
                limit=limit,
                now_s=now_s,
            )
        key = (table.keyspace, table.name, tuple(partition_key))
        with self._owner:
            if key not in self._fetched:
                self._prepare_table(table)
                found = self._plane.read_partition(table, key[2], self._consistency)
                if found is not None:
                    self.apply([found], now_s=now_s)
                self._fetched.add(key)
        return super().read_partition(
            table,
            partition_key,
            start=start,
            end=end,
            columns=columns,
            reverse=reverse,
            limit=limit,
            now_s=now_s,
        )

    def scan(
        self,
        table: Table | tuple[str, str],
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ScanPage:
        return self._local.scan(
            table,
            start_token_exclusive,
            end_token_inclusive,
            page_size=page_size,
            paging_state=paging_state,
            columns=columns,
            now_s=now_s,
        )
