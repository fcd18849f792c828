"""The cluster data plane: a statement's writes and reads routed through the node's coordinator.

``QueryProcessor`` runs statements on a statement thread and calls its ``DataPlane``
(``ringflow.cql._executor``). This plane hands each write or partition read to the
``ClusterNode`` on the event loop (``call_soon_threadsafe``). A statement's write (``submit``)
returns its ``concurrent.futures.Future`` at once: the statement thread goes on, and the server
answers when the coordinator has (bounded: the coordinator's own timeout plus a margin). How
many statements have taken their timestamp and not been answered is bounded by the server's
``max_statements_in_flight``, before their timestamp. Reads and the writes of callers that
must wait (role statements) block their thread on the future. Store work of the node runs on
other threads, so a blocked statement never holds up the replica verbs it waits for.

Reads: ``read`` runs a SELECT over a ``CoordinatedReader`` of its own, whose ``read_partition``
reads the partition's clustering slice (the read's ``start`` .. ``end``, with the static row and
every tombstone of the partition) through the coordinator (data + digests at the statement's
level, blocking read repair) and answers from the reconciled raw slice held in memory with the
storage layer's own slicing, paging and reconciliation functions (``ringflow.storage.HeldTable``:
the same rows the store would return after applying that slice). Only the slice travels: a window
read of a CDC stream's partition (``cdc$time > ? AND cdc$time <= ?``) costs the rows of the
window, not of the stream. At ONE or LOCAL_ONE a node that is a natural replica of the partition
reads its own copy straight from its store (Cassandra's local read; the coordinated read would
pick this node first anyway). Only user keyspaces, ``system_distributed``, ``system_replication``
and ``system_auth`` are coordinated; the other ``system*`` keyspaces are read and written locally
(each node keeps its own ``system.local``/``system.peers``).

Range scans (``scan``: SELECT without a partition key, ``token(k) > ? AND token(k) <= ?``) of
user keyspaces go through the coordinator's range read (``ClusterNode.read_range``) chunk by
chunk: a chunk is at most ``RANGE_CHUNK_PARTITIONS`` reconciled partitions from the chunk's
first token on, held in memory and scanned there (rows, columns, paging). The paging state this
reader hands out is its own, ``[chunk low, chunk high, paging state within the chunk, last
chunk]``; a page resumed by a later statement reads its chunk again. A reader holds one slice and
one chunk at a time: what a read holds in memory is bounded by the chunk's partitions, which the
replicas' answers (each within the internode frame limit) bound.

Schema changes reach the nodes one after the other (seed 004), so a replica may hold columns the
statement's table does not have (added there first, or not dropped there yet): a partition read
names the statement's columns and the replicas send those only (``_point_requests``); the cells
of other columns in a range read's partitions are left out when they are held.

Schema agreement (seed 004; issue 6 §4): after a DDL, ``await_schema_agreement`` waits (the
statement thread; the node answers from its event loop as soon as gossip brings agreement,
nothing polls) until every live node gossips this node's schema version, or
``schema_agreement_timeout_ms``; the DDL is answered
either way, with ``agreement_warning`` attached to the answer when some node still disagrees
(native protocol v4 warning; the drivers show it, e.g. ``ResponseFuture.warnings``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgpack

from ringflow.cdc import CdcCapture
from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._settings import ReadDone
from ringflow.cql import Consistency, Response, RowReader
from ringflow.cql._exec_common import (
    SYSTEM_AUTH_KEYSPACE,
    SYSTEM_DISTRIBUTED_KEYSPACE,
    SYSTEM_REPLICATION_KEYSPACE,
)
from ringflow.errors import InternalError, InvalidRequest
from ringflow.schema import ClusteringBound, Mutation, Table
from ringflow.storage import HeldPartition, HeldTable, ResultRow, ScanPage, Store, StoreLimits

_MARGIN_S = 2.0
_ONE = frozenset({Consistency.ONE, Consistency.LOCAL_ONE})
_NO_BOUND = ClusteringBound()
RANGE_CHUNK_PARTITIONS: Final = 1000
"""At most this many partitions per range read of the coordinator (one chunk)."""
MIN_RANGE_CHUNK_PARTITIONS: Final = 64
_STATE_TAG: Final = "ringflow-range-1"
_FetchKey = tuple[str, str, tuple[bytes, ...], ClusteringBound, ClusteringBound]
"""A slice read through the coordinator: keyspace, table, partition key, start, end."""
_ChunkKey = tuple[str, str, int, int]
"""A chunk of a range read: keyspace, table, low token (exclusive), high token (inclusive)."""


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


def _wait(future: concurrent.futures.Future[Any], timeout_s: float, what: str) -> object:
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
    ) -> None:
        self._node = node
        self._loop = loop
        self._local = local
        self._held: dict[tuple[str, str], HeldTable] = {}

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        """Apply ``batch`` and wait for it (a caller that must: a role statement's rows)."""
        timeout_s = self._node.settings.write_timeout_ms / 1000 + 2 * _MARGIN_S
        _wait(self.submit(batch, captures, consistency, now_us), timeout_s, "write")

    def submit(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> concurrent.futures.Future[None]:
        """Start ``batch``'s write (the coordinator's, on the event loop; node-local keyspaces
        on this thread) and return its future: done when the write is acknowledged at
        ``consistency``, or with its error; with InternalError if the coordinator has not
        answered ``write_timeout_ms`` plus a margin later. A statement's write: its thread does
        not wait for it, the server answers when the future is done."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not any(self.coordinated(m.keyspace) for m in batch):
            try:
                self._local.apply(batch, now_s=now_us // 1_000_000, cdc=dict(captures))
            except Exception as error:
                future.set_exception(error)
            else:
                future.set_result(None)
            return future
        timeout_s = self._node.settings.write_timeout_ms / 1000 + _MARGIN_S

        def start() -> None:  # on the event loop
            def expire() -> None:
                if not future.done():
                    message = f"write: the coordinator did not answer in {timeout_s} s"
                    future.set_exception(InternalError(message))

            deadline = self._loop.call_later(timeout_s, expire)

            def done(error: BaseException | None) -> None:
                deadline.cancel()
                if future.done():
                    return
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

            try:
                self._node.write(list(batch), dict(captures), consistency, done)
            except Exception as error:
                done(error)

        self._loop.call_soon_threadsafe(start)
        return future

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

    def read(self, consistency: Consistency, run: Callable[[RowReader], Response]) -> Response:
        """A SELECT's reads: ``run`` over a :class:`CoordinatedReader` of its own."""
        return run(CoordinatedReader(self, self._local, consistency))

    def held_table(self, table: Table) -> HeldTable:
        """The reads of ``table``'s partitions held in memory (one per table, made again when
        a schema change gives the statement another version of it)."""
        key = (table.keyspace, table.name)
        found = self._held.get(key)
        if found is None or found.table is not table:
            found = self._held[key] = HeldTable(table, self._local.limits)
        return found

    def await_schema_agreement(self, timeout_ms: int | None = None) -> dict[str, str | None]:
        """Wait (the statement thread) until every live node agrees on this node's schema
        version, at most ``timeout_ms`` (default: the node's ``schema_agreement_timeout_ms``);
        the nodes still disagreeing then (empty: agreement). The node answers as soon as
        gossip brings agreement (``ClusterNode.await_schema_agreement``): nothing polls."""
        if timeout_ms is None:
            timeout_ms = self._node.settings.schema_agreement_timeout_ms
        future: concurrent.futures.Future[object] = concurrent.futures.Future()

        def begin() -> None:
            try:
                self._node.await_schema_agreement(timeout_ms, future.set_result)
            except Exception as error:
                future.set_exception(error)

        self._loop.call_soon_threadsafe(begin)
        found = _wait(future, timeout_ms / 1000 + _MARGIN_S, "schema agreement")
        assert isinstance(found, dict)
        return found

    def schema_agreement_warning(self) -> str | None:
        """After a DDL: wait for agreement (``await_schema_agreement``); the warning for the
        answer if it was not reached, else None."""
        timeout_ms = self._node.settings.schema_agreement_timeout_ms
        disagreeing = self.await_schema_agreement(timeout_ms)
        return agreement_warning(timeout_ms, disagreeing) if disagreeing else None

    def close(self) -> None:
        """Nothing to release: a coordinated read holds its partitions in memory only."""
        self._held.clear()


class CoordinatedReader:
    """A SELECT's rows, read through the coordinator (module docstring): one per statement,
    used by its statement thread alone. It holds at most one fetched partition slice and one
    range chunk at a time."""

    def __init__(self, plane: ClusterDataPlane, local: Store, consistency: Consistency) -> None:
        self._plane = plane
        self._local = local
        self._consistency = consistency
        self._slice: tuple[_FetchKey, HeldPartition | None] | None = None
        self._chunk: tuple[_ChunkKey, list[HeldPartition]] | None = None

    @property
    def limits(self) -> StoreLimits:
        return self._local.limits

    def read_partition(
        self,
        table: Table,
        partition_key: Sequence[bytes],
        *,
        start: ClusteringBound = _NO_BOUND,
        end: ClusteringBound = _NO_BOUND,
        columns: Sequence[str] | None = None,
        reverse: bool = False,
        limit: int | None = None,
        now_s: int,
    ) -> list[ResultRow]:
        # at ONE a coordinator that is a replica reads its own copy alone (as Cassandra does)
        read: Callable[..., list[ResultRow]]
        if not self._plane.coordinated(table.keyspace) or (
            self._consistency in _ONE and self._plane.serves_locally(table, partition_key)
        ):
            read = functools.partial(self._local.read_partition, table, partition_key)
        else:
            held = self._plane.held_table(table)
            found = self._fetch(held, tuple(partition_key), start, end)
            read = functools.partial(held.read_partition, found)
        return read(
            start=start, end=end, columns=columns, reverse=reverse, limit=limit, now_s=now_s
        )

    def _fetch(
        self,
        held: HeldTable,
        partition_key: tuple[bytes, ...],
        start: ClusteringBound,
        end: ClusteringBound,
    ) -> HeldPartition | None:
        """The partition's slice, read through the coordinator (the last one is kept: a
        statement may read the same slice again)."""
        table = held.table
        key = (table.keyspace, table.name, partition_key, start, end)
        if self._slice is not None and self._slice[0] == key:
            return self._slice[1]
        found = self._plane.read_partition(table, partition_key, self._consistency, start, end)
        partition = None if found is None else held.hold(found)
        self._slice = (key, partition)
        return partition

    def scan(
        self,
        table: Table,
        start_token_exclusive: int,
        end_token_inclusive: int,
        *,
        page_size: int,
        paging_state: bytes | None = None,
        columns: Sequence[str] | None = None,
        now_s: int,
    ) -> ScanPage:
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
        held = self._plane.held_table(table)
        if paging_state is None:
            low, high, inner, last = start_token_exclusive, None, None, False
        else:
            low, high, inner, last = _decode_state(paging_state)
        if high is None:
            limit = max(MIN_RANGE_CHUNK_PARTITIONS, min(page_size, RANGE_CHUNK_PARTITIONS))
            found, covered = self._plane.read_range(
                table, low, end_token_inclusive, self._consistency, limit
            )
            last = covered is None or covered == end_token_inclusive
            high = end_token_inclusive if last or covered is None else covered
            self._chunk = (
                (table.keyspace, table.name, low, high),
                [held.hold(partition) for partition in found],
            )
        elif self._chunk is None or self._chunk[0] != (table.keyspace, table.name, low, high):
            self._chunk = (
                (table.keyspace, table.name, low, high),
                self._read_chunk(held, low, high),
            )
        page = held.scan(
            self._chunk[1],
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

    def _read_chunk(self, held: HeldTable, low: int, high: int) -> list[HeldPartition]:
        """Read a chunk again, whole, for a page resumed inside it."""
        partitions: list[HeldPartition] = []
        cursor = low
        while True:
            found, covered = self._plane.read_range(
                held.table, cursor, high, self._consistency, RANGE_CHUNK_PARTITIONS
            )
            partitions.extend(held.hold(partition) for partition in found)
            if covered is None or covered == high:
                return partitions
            cursor = covered


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
