"""The cluster data plane: a statement's writes and reads routed through the node's coordinator.

``QueryProcessor`` runs statements on a statement thread and calls its ``DataPlane``
(``ringflow.cql._executor``). This plane hands each write or partition read to the
``ClusterNode`` on the event loop (``call_soon_threadsafe``) and blocks the statement thread on a
``concurrent.futures.Future`` until the coordinator answers (bounded: the coordinator's own
timeout plus a margin). Store work of the node runs on other threads, so a blocked statement
never holds up the replica verbs it waits for.

Reads: ``read`` runs a SELECT over a ``CoordinatedReadStore`` of its own (a pool of at most
``SCRATCH_READERS``), a scratch ``Store`` (a file of its own in the data directory) whose
``read_partition`` first reads the partition's clustering slice (the read's ``start`` .. ``end``,
with the static row and every tombstone of the partition) through the coordinator (data + digests
at the statement's level, blocking read repair), writes the reconciled raw slice into the scratch
store, then answers from it with the storage layer's own slicing, paging and reconciliation. Only
the slice travels: a window read of a CDC stream's partition (``cdc$time > ? AND cdc$time <= ?``)
costs the rows of the window, not of the stream. At ONE or LOCAL_ONE a node that is a natural
replica of the partition reads its own copy straight from its store (Cassandra's local read; the
coordinated read would pick this node first anyway), with no scratch copy. Only user keyspaces and
``system_distributed`` are coordinated; the other ``system*`` keyspaces are read and written
locally (each node keeps its own ``system.local``/``system.peers``).

Range scans (``scan``: SELECT without a partition key, ``token(k) > ? AND token(k) <= ?``) of
user keyspaces go through the coordinator's range read (``ClusterNode.read_range``) chunk by
chunk: a chunk is at most ``RANGE_CHUNK_PARTITIONS`` reconciled partitions from the chunk's
first token on, written into the scratch store, then scanned there (rows, columns, paging).
The paging state this store hands out is its own, ``[chunk low, chunk high, scratch paging state,
last chunk]``; a page resumed by a later statement reads its chunk again (the scratch store is
cleared per statement).

Schema changes reach the nodes one after the other (seed 004), so a replica may hold columns the
statement's table does not have (added there first, or not dropped there yet): a partition read
names the statement's columns and the replicas send those only (``_point_requests``); a range
read's partitions are cut to them here, before they go into the scratch store, which has the
statement's table and would refuse a cell of another column.

Schema agreement (seed 004; issue 6 §4): after a DDL, ``await_schema_agreement`` blocks the
statement thread (polling the node on the event loop, never blocking the loop) until every live
node gossips this node's schema version, or ``schema_agreement_timeout_ms``; the DDL is answered
either way, with ``agreement_warning`` attached to the answer when some node still disagrees
(native protocol v4 warning; the drivers show it, e.g. ``ResponseFuture.warnings``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import msgpack

from ringflow.cdc import CdcCapture
from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._settings import ReadDone, WriteDone
from ringflow.cql import Consistency, Response
from ringflow.cql._exec_common import (
    SYSTEM_AUTH_KEYSPACE,
    SYSTEM_DISTRIBUTED_KEYSPACE,
    SYSTEM_REPLICATION_KEYSPACE,
)
from ringflow.errors import InternalError, InvalidRequest
from ringflow.schema import ClusteringBound, ComplexColumn, Mutation, Table, restrict_columns
from ringflow.storage import ResultRow, ScanPage, Store

_MARGIN_S = 2.0
_ONE = frozenset({Consistency.ONE, Consistency.LOCAL_ONE})
_AGREEMENT_POLL_S = 0.05
_NO_BOUND = ClusteringBound()
RANGE_CHUNK_PARTITIONS: Final = 1000
"""At most this many partitions per range read of the coordinator (one chunk)."""
SCRATCH_READERS: Final = 4
"""At most this many SELECTs of one node read through the coordinator at once, each with a
scratch store (a file) of its own."""
MIN_RANGE_CHUNK_PARTITIONS: Final = 64
_STATE_TAG: Final = "ringflow-range-1"
_FetchKey = tuple[str, str, tuple[bytes, ...], ClusteringBound, ClusteringBound]
"""A slice fetched into the scratch store: keyspace, table, partition key, start, end."""


def value_column_names(table: Table) -> tuple[str, ...]:
    """The static and regular columns of ``table``: what a read of it asks the replicas for."""
    return tuple(column.name for column in (*table.static_columns, *table.regular_columns))


def agreement_warning(timeout_ms: int, disagreeing: Mapping[str, str | None]) -> str:
    """The warning a DDL answer carries when ``disagreeing`` nodes (address: the schema
    version they gossip) did not agree within ``timeout_ms``."""
    nodes = ", ".join(
        f"{address} (schema version {version or 'unknown'})"
        for address, version in sorted(disagreeing.items())
    )
    return (
        f"Schema agreement was not reached within {timeout_ms} ms: the schema change is applied "
        f"on this node and will propagate, but these live nodes still disagree: {nodes}"
    )


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
        self._scratch_path = scratch_path
        self._idle: list[CoordinatedReadStore] = []  # scratch stores not in use
        self._made = 0
        self._readers = threading.Condition()

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
        """User keyspaces, ``system_distributed``, ``system_replication`` and ``system_auth``
        (RF 3 whatever the
        ring's size: with more than three nodes a node may hold none of their partitions, so
        their reads must be coordinated too) are replicated; the other ``system*`` keyspaces
        are node-local here (``system_distributed_everywhere`` is on every node)."""
        if keyspace in (
            SYSTEM_DISTRIBUTED_KEYSPACE,
            SYSTEM_REPLICATION_KEYSPACE,
            SYSTEM_AUTH_KEYSPACE,
        ):
            return True
        return keyspace in self._node.processor.schema.keyspaces

    def read_partition(
        self,
        table: Table,
        partition_key: tuple[bytes, ...],
        consistency: Consistency,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
    ) -> Mutation | None:
        """The reconciled raw partition (only its clustering slice ``start`` .. ``end``, with
        its static row and tombstones, when bounded) read through the coordinator."""
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def done(partition: Mutation | None, error: BaseException | None) -> None:
            if error is None:
                future.set_result(partition)
            else:
                future.set_exception(error)

        columns = value_column_names(table)

        def begin(callback: ReadDone) -> None:
            self._node.read(
                table.keyspace,
                table.name,
                partition_key,
                consistency,
                callback,
                start,
                end,
                columns,
            )

        self._loop.call_soon_threadsafe(begin, done)
        timeout_s = self._node.settings.read_timeout_ms / 1000 + _MARGIN_S
        result = _wait(future, timeout_s, "read")
        return result if isinstance(result, Mutation) else None

    def serves_locally(self, table: Table, partition_key: Sequence[bytes]) -> bool:
        """This node is a natural replica of the partition (so a read at ONE reads here)."""
        try:
            token = base_token(Mutation(table.keyspace, table.name, tuple(partition_key)))
            return self._node.host in self._node.replicas_of(table.keyspace, token).natural
        except Exception:  # a ring changing under us: take the coordinated path
            return False

    def read_range(
        self,
        table: Table,
        left: int,
        right: int,
        consistency: Consistency,
        limit: int,
    ) -> tuple[list[Mutation], int | None]:
        """At most ``limit`` reconciled partitions of ``(left, right]`` in token order, and the
        last token covered (None: the whole range)."""
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def done(
            partitions: list[Mutation] | None, covered: int | None, error: BaseException | None
        ) -> None:
            if error is None:
                future.set_result((partitions or [], covered))
            else:
                future.set_exception(error)

        def start() -> None:
            self._node.read_range(table.keyspace, table.name, left, right, consistency, limit, done)

        self._loop.call_soon_threadsafe(start)
        timeout_s = self._node.settings.range_timeout_ms / 1000 + _MARGIN_S
        result = _wait(future, timeout_s, "range read")
        assert isinstance(result, tuple)
        partitions, covered = result
        return partitions, covered

    def read(self, consistency: Consistency, run: Callable[[Store], Response]) -> Response:
        """A SELECT's reads: ``run`` over a scratch store of its own (at most
        ``SCRATCH_READERS`` SELECTs at once; more wait for one to finish)."""
        reader = self._take_reader()
        try:
            reader.begin(consistency)
            return run(reader)
        finally:
            with self._readers:
                self._idle.append(reader)
                self._readers.notify()

    def _take_reader(self) -> CoordinatedReadStore:
        with self._readers:
            while not self._idle and self._made >= SCRATCH_READERS:
                self._readers.wait()
            if self._idle:
                return self._idle.pop()
            index, self._made = self._made, self._made + 1
        path = self._scratch_path
        if index:
            path = path.with_name(f"{path.stem}-{index}{path.suffix}")
        try:
            return CoordinatedReadStore(path, self, self._local)
        except BaseException:
            with self._readers:
                self._made -= 1
                self._readers.notify()
            raise

    def schema_disagreement(self) -> dict[str, str | None]:
        """``ClusterNode.schema_disagreement``, asked on the event loop (statement thread)."""
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def probe() -> None:
            try:
                future.set_result(self._node.schema_disagreement())
            except Exception as error:
                future.set_exception(error)

        self._loop.call_soon_threadsafe(probe)
        found = _wait(future, _MARGIN_S + 8.0, "schema agreement probe")
        assert isinstance(found, dict)
        return found

    def await_schema_agreement(self, timeout_ms: int | None = None) -> dict[str, str | None]:
        """Block (the statement thread) until every live node agrees on this node's schema
        version, at most ``timeout_ms`` (default: the node's ``schema_agreement_timeout_ms``);
        the nodes still disagreeing then (empty: agreement)."""
        if timeout_ms is None:
            timeout_ms = self._node.settings.schema_agreement_timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            disagreeing = self.schema_disagreement()
            remaining = deadline - time.monotonic()
            if not disagreeing or remaining <= 0:
                return disagreeing
            time.sleep(min(_AGREEMENT_POLL_S, remaining))

    def schema_agreement_warning(self) -> str | None:
        """After a DDL: wait for agreement (``await_schema_agreement``); the warning for the
        answer if it was not reached, else None."""
        timeout_ms = self._node.settings.schema_agreement_timeout_ms
        disagreeing = self.await_schema_agreement(timeout_ms)
        return agreement_warning(timeout_ms, disagreeing) if disagreeing else None

    def close(self) -> None:
        with self._readers:
            idle, self._idle = self._idle, []
        for reader in idle:
            reader.close()


class CoordinatedReadStore(Store):
    """A scratch store filled, partition by partition, by coordinated reads (module docstring).

    Used by one SELECT at a time (``ClusterDataPlane.read`` hands it out); ``begin`` starts a
    statement.
    """

    def __init__(self, path: Path, plane: ClusterDataPlane, local: Store) -> None:
        super().__init__(path, synchronous="NORMAL", limits=local.limits)
        self._plane = plane
        self._local = local
        self._consistency = Consistency.ONE
        self._fetched: set[_FetchKey] = set()
        self._cleared: set[tuple[str, str]] = set()
        self._chunks: set[tuple[str, str, int, int]] = set()
        self._owner = threading.Lock()

    def begin(self, consistency: Consistency) -> None:
        self._consistency = consistency
        self._fetched.clear()
        self._cleared.clear()
        self._chunks.clear()

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
        # at ONE a coordinator that is a replica reads its own copy alone (as Cassandra does)
        local = not self._plane.coordinated(table.keyspace) or (
            self._consistency in _ONE and self._plane.serves_locally(table, partition_key)
        )
        if not local:
            self._fetch(table, tuple(partition_key), start, end, now_s)
        source: Store = self._local if local else self
        return Store.read_partition(  # the base class's read (``self.read_partition`` is this)
            source,
            table,
            partition_key,
            start=start,
            end=end,
            columns=columns,
            reverse=reverse,
            limit=limit,
            now_s=now_s,
        )

    def _fetch(
        self,
        table: Table,
        partition_key: tuple[bytes, ...],
        start: ClusteringBound,
        end: ClusteringBound,
        now_s: int,
    ) -> None:
        """The partition's slice, read through the coordinator, into the scratch store."""
        key = (table.keyspace, table.name, partition_key, start, end)
        with self._owner:
            if key not in self._fetched:
                self._prepare_table(table)
                found = self._plane.read_partition(table, key[2], self._consistency, start, end)
                if found is not None:
                    self.apply([found], now_s=now_s)
                self._fetched.add(key)

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
        if not isinstance(table, Table):
            table = self._local.table(*table)
        if not self._plane.coordinated(table.keyspace):
            return self._local.scan(
                table,
                start_token_exclusive,
                end_token_inclusive,
                page_size=page_size,
                paging_state=paging_state,
                columns=columns,
                now_s=now_s,
            )
        with self._owner:
            self._prepare_table(table)
            if paging_state is None:
                low, high, inner, last = start_token_exclusive, None, None, False
            else:
                low, high, inner, last = _decode_state(paging_state)
            if high is None:
                limit = max(MIN_RANGE_CHUNK_PARTITIONS, min(page_size, RANGE_CHUNK_PARTITIONS))
                found, covered = self._plane.read_range(
                    table, low, end_token_inclusive, self._consistency, limit
                )
                if found:
                    self._apply_partitions(_restricted(table, found), now_s)
                last = covered is None or covered == end_token_inclusive
                high = end_token_inclusive if last or covered is None else covered
                self._chunks.add((table.keyspace, table.name, low, high))
            elif (table.keyspace, table.name, low, high) not in self._chunks:
                self._fetch_chunk(table, low, high, now_s)
            page = super().scan(
                table,
                low,
                high,
                page_size=page_size,
                paging_state=inner,
                columns=columns,
                now_s=now_s,
            )
        if page.paging_state is not None:
            state: bytes | None = _encode_state(low, high, page.paging_state, last)
        elif last:
            state = None
        else:
            state = _encode_state(high, None, None, False)
        return ScanPage(page.rows, state)

    def _apply_partitions(self, partitions: list[Mutation], now_s: int) -> None:
        """A chunk's partitions into the scratch store, in batches within the store's
        ``max_batch_cells`` (a chunk of 1,000 wide partitions holds more: issue 17's diff hit
        it); a partition over the limit alone is refused as it would be written."""
        budget = max(1, self.limits.max_batch_cells // 2)  # headroom over the estimate
        batch: list[Mutation] = []
        cells = 0
        for partition in partitions:
            size = _cells_estimate(partition)
            if batch and cells + size > budget:
                self.apply(batch, now_s=now_s)
                batch, cells = [], 0
            batch.append(partition)
            cells += size
        if batch:
            self.apply(batch, now_s=now_s)

    def _fetch_chunk(self, table: Table, low: int, high: int, now_s: int) -> None:
        """Read a chunk again, whole, for a page resumed inside it."""
        cursor = low
        while True:
            found, covered = self._plane.read_range(
                table, cursor, high, self._consistency, RANGE_CHUNK_PARTITIONS
            )
            if found:
                self._apply_partitions(_restricted(table, found), now_s)
            if covered is None or covered == high:
                break
            cursor = covered
        self._chunks.add((table.keyspace, table.name, low, high))


def _cells_estimate(partition: Mutation) -> int:
    """About the cells ``partition`` flattens to: a row marker, deletion and value cells per
    row, each element of a collection, each tombstone."""
    rows = (*(() if partition.static_row is None else (partition.static_row,)), *partition.rows)
    count = 1 + len(partition.range_tombstones)
    for row in rows:
        count += 2
        for data in row.cells.values():
            count += len(data.cells) + 1 if isinstance(data, ComplexColumn) else 1
    return count


def _restricted(table: Table, partitions: list[Mutation]) -> list[Mutation]:
    """``partitions`` with only the cells of ``table``'s columns (the module docstring)."""
    columns = frozenset(value_column_names(table))
    restricted = [restrict_columns(partition, columns) for partition in partitions]
    return [partition for partition in restricted if not partition.is_empty]


def _encode_state(low: int, high: int | None, inner: bytes | None, last: bool) -> bytes:
    state: bytes = msgpack.packb([_STATE_TAG, low, high, inner, last], use_bin_type=True)
    return state


def _decode_state(state: bytes) -> tuple[int, int | None, bytes | None, bool]:
    """``(chunk low, chunk high or None for a chunk not read yet, scratch state, last)``."""
    try:
        tag, low, high, inner, last = msgpack.unpackb(state, raw=False)
    except Exception:
        raise InvalidRequest("invalid paging state for a range read") from None
    if (
        tag != _STATE_TAG
        or type(low) is not int
        or not (high is None or type(high) is int)
        or not (inner is None or type(inner) is bytes)
        or type(last) is not bool
        or (high is None and inner is not None)
    ):
        raise InvalidRequest("invalid paging state for a range read")
    return low, high, inner, last
