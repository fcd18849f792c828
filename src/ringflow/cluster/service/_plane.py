"""The cluster data plane: a statement's writes and reads routed through the node's coordinator.

``QueryProcessor`` runs statements on a statement thread and calls its ``DataPlane``
(``ringflow.cql._executor``). This plane hands each write or partition read to the
``ClusterNode`` on the event loop (``call_soon_threadsafe``). A statement's write (``submit``)
returns its ``concurrent.futures.Future`` at once: the statement thread goes on, and the server
answers when the coordinator has (bounded: the coordinator's own timeout plus a margin). How
many statements have taken their timestamp and not been answered is bounded by the server's
``max_statements_in_flight``, before their timestamp. Auth work (role statements, logins)
reads and writes through the same ``submit`` and ``submit_read`` (``ringflow.cql``'s
``run_auth``): no caller waits on a thread.

Reads: a SELECT runs over a ``CoordinatedReader`` of its own, whose ``read_partition`` reads
the partition's clustering slice (the read's ``start`` .. ``end``, with the static row and every
tombstone of the partition) through the coordinator (data + digests at the statement's level,
blocking read repair) and answers from the reconciled raw slice held in memory with the storage
layer's own slicing, paging and reconciliation functions (``ringflow.storage.HeldTable``: the
same rows the store would return after applying that slice). A slice held answers every read
of the statement inside it (a page resumed within the partition costs no second read).

A statement's SELECT (``submit_read``) waits on no thread for its reads. Its first run (a
survey) runs on its statement thread, and each slice or range chunk it asks for that is not held
yet is noted and read as empty; when the run ends, the noted reads are made through the
coordinator at once (on the event loop, in parallel, bounded by the read timeout plus a margin),
so an IN of many partitions costs one round of parallel reads. Then the SELECT runs in steps
(``ringflow.cql``'s ``select_steps``) over what is held: where it lacks a read (a chunk further
on in a scan, a slice the survey could not name), the reader raises ``RowsNotHeld``, the steps
yield it, the plane reads it and the SELECT goes on from there, not from its start: on the
event loop (it only reads what is held: pure CPU, no hand-off to a thread), or on the statement
thread when it reads the local store. Nothing waits on a thread, however many chunks a page, an
aggregate or an unpaged SELECT spans. A plain read run (auth rows: a function over the reader,
not steps) is run again over what is held until a run needs nothing new, at most
``MAX_PLAIN_RUNS`` times. The plane has no blocking ``read`` or ``write``.

Only the slice travels: a window read of a CDC stream's partition (``cdc$time > ? AND cdc$time
<= ?``) costs the rows of the window, not of the stream. At ONE or LOCAL_ONE a node that is a
natural replica of the partition reads its own copy straight from its store (Cassandra's local
read; the coordinated read would pick this node first anyway). Only user keyspaces,
``system_distributed``, ``system_replication`` and ``system_auth`` are coordinated; the other
``system*`` keyspaces are read and written locally (each node keeps its own
``system.local``/``system.peers``).

Range scans (``scan``: SELECT without a partition key, ``token(k) > ? AND token(k) <= ?``) of
user keyspaces go through the coordinator's range read (``ClusterNode.read_range``) chunk by
chunk: a chunk is at most ``RANGE_CHUNK_PARTITIONS`` reconciled partitions from the chunk's
first token on, held in memory and scanned there (rows, columns, paging). The paging state this
reader hands out is its own, ``[chunk low, chunk high, paging state within the chunk, last
chunk]``; a page resumed by a later statement reads its chunk again. A SELECT in steps holds
one chunk at a time (its survey at most one): what a scan holds in memory is bounded by the
chunks' partitions, which the replicas' answers
(each within the internode frame limit) bound. Whatever a statement holds (slices and chunks)
is also bounded in bytes: past ``StoreLimits.max_held_read_bytes`` (64 MiB) of estimated
serialized size the SELECT is refused (``ResultTooLarge``, an Invalid error naming the limit).

Schema changes reach the nodes one after the other (seed 004), so a replica may hold columns the
statement's table does not have (added there first, or not dropped there yet): a partition read
names the statement's columns and the replicas send those only (``_point_requests``); the cells
of other columns in a range read's partitions are left out when they are held.

Schema agreement (seed 004; issue 6 §4): after a DDL, ``schema_agreement_warning`` waits (on
the event loop, no thread waiting; the node answers as soon as gossip brings agreement, nothing
polls) until every live node gossips this node's schema version, or
``schema_agreement_timeout_ms``; the DDL is answered either way, with ``agreement_warning``
attached to the answer when some node still disagrees (native protocol v4 warning; the drivers
show it, e.g. ``ResponseFuture.warnings``).
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeGuard

import msgpack

from ringflow.cdc import CdcCapture
from ringflow.cluster._coordinator import base_token
from ringflow.cluster.service._node import ClusterNode
from ringflow.cql import (
    SYSTEM_AUTH_KEYSPACE,
    SYSTEM_DISTRIBUTED_KEYSPACE,
    SYSTEM_REPLICATION_KEYSPACE,
    Consistency,
    ReadRun,
    Response,
    RowsNotHeld,
    Steps,
    run_steps,
)
from ringflow.errors import InternalError, InvalidRequest
from ringflow.schema import ClusteringBound, Mutation, Table
from ringflow.storage import (
    HeldPartition,
    HeldTable,
    ResultRow,
    ResultTooLarge,
    ScanPage,
    Store,
    StoreLimits,
    mutation_size,
)

_MARGIN_S = 2.0
MAX_PLAIN_RUNS: Final = 64
"""A read run that is not a SELECT in steps (a plain function over the reader: auth rows) is
run again at most this many times; one that still lacks reads then fails (InternalError)."""
_ONE = frozenset({Consistency.ONE, Consistency.LOCAL_ONE})
_NO_BOUND = ClusteringBound()
RANGE_CHUNK_PARTITIONS: Final = 1000
"""At most this many partitions per range read of the coordinator (one chunk)."""
MIN_RANGE_CHUNK_PARTITIONS: Final = 64
_STATE_TAG: Final = "ringflow-range-1"
_Slice = tuple[Table, tuple[bytes, ...], ClusteringBound, ClusteringBound]
"""A slice read through the coordinator: table, partition key, start, end."""
_PartitionKey = tuple[str, str, tuple[bytes, ...]]
_Held = tuple[bytes, bytes, HeldPartition | None]
"""A slice held: its ``[low, high)`` of ``ck`` (``HeldTable.interval``) and the partition
(None: nothing there)."""


@dataclass(frozen=True, slots=True)
class _ChunkRead:
    """A range read of a scan: the first chunk from ``low`` on (at most ``limit`` partitions
    of ``(low, high]``), or, with ``limit`` None, the whole chunk ``(low, high]`` again."""

    table: Table
    low: int
    high: int
    limit: int | None

    @property
    def key(self) -> tuple[str, str, int, int, int | None]:
        return (self.table.keyspace, self.table.name, self.low, self.high, self.limit)


@dataclass(frozen=True, slots=True)
class _HeldChunk:
    partitions: list[HeldPartition]
    high: int
    """The chunk is ``(low, high]``."""


_Read = _Slice | _ChunkRead
"""A read a SELECT lacked: a partition slice, or a chunk of a scan."""
_Found = Mutation | None | tuple[list[Mutation], int | None]
"""What a read found: a slice's partition (None: nothing), a chunk's partitions and the last
token the read covered (None: all of its range)."""


def _is_read(lacking: object) -> TypeGuard[_Read]:
    """``lacking`` is a read of this plane's readers (a slice, or a chunk of a scan)."""
    return isinstance(lacking, _ChunkRead) or (isinstance(lacking, tuple) and len(lacking) == 4)


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


class EventLoop(Protocol):
    """What the plane asks of the node's event loop: asyncio's loop, or a ``ClockLoop`` over
    the simulator's clock."""

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> object: ...

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> _Cancellable: ...


class _Cancellable(Protocol):
    def cancel(self) -> None: ...


class ClusterDataPlane:
    """``DataPlane`` of a cluster node (see the module docstring).

    ``loop`` runs the coordinator's calls; ``statements`` goes on with a SELECT that reads
    the local store once its reads are here. Nothing here waits on a thread: the plane has
    no blocking ``write`` or ``read`` (the processor calls them only without ``submit`` and
    ``submit_read``, which it is given)."""

    def __init__(
        self,
        node: ClusterNode,
        loop: EventLoop,
        local: Store,
        statements: concurrent.futures.Executor | None = None,
    ) -> None:
        self._node = node
        self._loop = loop
        self._local = local
        self._statements = statements
        """Where a SELECT that reads the local store goes on once its reads are here."""
        self._held: dict[tuple[str, str], HeldTable] = {}

    def write(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> None:
        """Not on a cluster node: its writes are submitted (:meth:`submit`)."""
        raise InternalError("a cluster node's writes are submitted, never waited for")

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

    def serves_locally(self, table: Table, partition_key: Sequence[bytes]) -> bool:
        """This node is a natural replica of the partition (so a read at ONE reads here)."""
        try:
            token = base_token(Mutation(table.keyspace, table.name, tuple(partition_key)))
            return (
                self._node.host in self._node.placement.replicas_of(table.keyspace, token).natural
            )
        except Exception:  # a ring changing under us: take the coordinated path
            return False

    def read(self, consistency: Consistency, run: ReadRun) -> Response:
        """Not on a cluster node: its reads are submitted (:meth:`submit_read`)."""
        raise InternalError("a cluster node's reads are submitted, never waited for")

    def submit_read(
        self, consistency: Consistency, run: ReadRun
    ) -> concurrent.futures.Future[Response]:
        """A statement's reads, waited for by no thread (module docstring): its future is done
        with the answer of ``run``, or its error."""
        future: concurrent.futures.Future[Response] = concurrent.futures.Future()
        reader = CoordinatedReader(self, self._local, consistency)
        self._attempt(reader, run, future, 1)
        return future

    def _attempt(
        self,
        reader: CoordinatedReader,
        run: ReadRun,
        future: concurrent.futures.Future[Response],
        run_number: int,
    ) -> None:
        """Run ``run`` over what ``reader`` holds, noting what it lacks; answer, or read what
        it lacked and go on (module docstring)."""
        answer: Response | None = None
        failure: Exception | None = None
        try:
            ran = run(reader)
            if isinstance(ran, Generator):
                if run_number > 1:  # it goes on where it lacks reads, from here
                    reader.suspending = True
                    self._step(reader, ran, future)
                    return
                answer = run_steps(ran)  # the survey: what it lacks is noted, read as empty
            else:
                answer = ran
        except Exception as error:  # may be for lack of a slice: only final when none lacks
            failure = error
        missing = reader.take_missing()
        if missing and run_number >= MAX_PLAIN_RUNS:
            message = f"the read still lacked rows after {run_number} rounds of reads"
            future.set_exception(InternalError(message))
        elif missing:

            def rerun() -> None:
                self._attempt(reader, run, future, run_number + 1)

            self._read_then(missing, reader, future, rerun)
        elif failure is not None:
            future.set_exception(failure)
        else:
            assert answer is not None
            future.set_result(answer)

    def _step(
        self,
        reader: CoordinatedReader,
        steps: Steps[Response],
        future: concurrent.futures.Future[Response],
    ) -> None:
        """Go on with a SELECT in steps until it answers, or lacks reads: read them, then go
        on from there."""
        try:
            lacking = next(steps)
        except StopIteration as done:
            future.set_result(done.value)
            return
        except Exception as error:
            future.set_exception(error)
            return
        reads: list[_Read] = [read for read in lacking if _is_read(read)]
        if len(reads) != len(lacking) or not reads:
            steps.close()
            future.set_exception(InternalError(f"a SELECT lacked reads of no kind: {lacking}"))
            return
        self._read_then(reads, reader, future, lambda: self._step(reader, steps, future))

    def _read_then(
        self,
        missing: Sequence[_Read],
        reader: CoordinatedReader,
        future: concurrent.futures.Future[Response],
        proceed: Callable[[], None],
    ) -> None:
        """Read ``missing`` on the event loop, hold it in ``reader``, then ``proceed``."""
        try:
            self._loop.call_soon_threadsafe(self._read_missing, missing, reader, future, proceed)
        except RuntimeError as closed:  # the node is shutting down
            future.set_exception(closed)

    def _read_missing(
        self,
        missing: Sequence[_Read],
        reader: CoordinatedReader,
        future: concurrent.futures.Future[Response],
        proceed: Callable[[], None],
    ) -> None:
        """On the event loop: read ``missing`` through the coordinator, all at once; when
        every one is here, hold them and go on: here when the statement only reads what is
        held (pure CPU, no hand-off), on a statement thread when it reads the local store."""
        found: list[_Found] = [None] * len(missing)
        remaining = len(missing)
        settings = self._node.settings
        ranges = any(isinstance(read, _ChunkRead) for read in missing)
        timeout_ms = settings.range_timeout_ms if ranges else settings.read_timeout_ms
        timeout_s = timeout_ms / 1000 + _MARGIN_S  # the coordinator's own timeouts come first

        def fail(error: BaseException) -> None:
            deadline.cancel()
            if not future.done():
                future.set_exception(error)

        def expire() -> None:
            fail(InternalError(f"read: the coordinator did not answer in {timeout_s} s"))

        def go_on() -> None:
            try:
                reader.hold(missing, found)
            except Exception as error:  # a partition the table cannot hold: the answer
                future.set_exception(error)
                return
            proceed()

        def arrived(index: int, result: _Found) -> None:
            nonlocal remaining
            if future.done():
                return
            found[index] = result
            remaining -= 1
            if remaining:
                return
            deadline.cancel()
            if not reader.reads_store:
                go_on()  # pure over what is held: here, no hand-off to a thread
                return
            try:
                if self._statements is None:
                    raise InternalError("no executor to answer a read on")
                self._statements.submit(go_on)
            except Exception as refused:  # shutting down
                fail(refused)

        deadline = self._loop.call_later(timeout_s, expire)
        for index, read in enumerate(missing):
            try:
                if isinstance(read, _ChunkRead):
                    self._read_chunk(
                        read, reader.consistency, functools.partial(arrived, index), fail
                    )
                else:
                    self._read_slice(
                        read, reader.consistency, functools.partial(arrived, index), fail
                    )
            except Exception as error:
                fail(error)
                return

    def _read_slice(
        self,
        read: _Slice,
        consistency: Consistency,
        arrived: Callable[[_Found], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        table, partition_key, start, end = read

        def done(partition: Mutation | None, error: BaseException | None) -> None:
            if error is not None:
                fail(error)
            else:
                arrived(partition)

        columns = value_column_names(table)
        self._node.read(
            table.keyspace, table.name, partition_key, consistency, done, start, end, columns
        )

    def _read_chunk(
        self,
        read: _ChunkRead,
        consistency: Consistency,
        arrived: Callable[[_Found], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        """A first chunk: one range read; a whole chunk: range reads from its low token on
        until one covers its high token."""
        partitions: list[Mutation] = []
        table = read.table

        def step(cursor: int) -> None:
            limit = RANGE_CHUNK_PARTITIONS if read.limit is None else read.limit
            self._node.read_range(
                table.keyspace, table.name, cursor, read.high, consistency, limit, done
            )

        def done(
            found: list[Mutation] | None, covered: int | None, error: BaseException | None
        ) -> None:
            if error is not None:
                fail(error)
                return
            partitions.extend(found or [])
            if read.limit is not None:
                arrived((partitions, covered))
            elif covered is None or covered == read.high:
                arrived((partitions, read.high))
            else:
                try:
                    step(covered)
                except Exception as refused:
                    fail(refused)

        step(read.low)

    def held_table(self, table: Table) -> HeldTable:
        """The reads of ``table``'s partitions held in memory (one per table, made again when
        a schema change gives the statement another version of it)."""
        key = (table.keyspace, table.name)
        found = self._held.get(key)
        if found is None or found.table is not table:
            found = self._held[key] = HeldTable(table, self._local.limits)
        return found

    def schema_agreement_warning(self) -> concurrent.futures.Future[str | None]:
        """After a DDL (from any thread): a future done once every live node agrees on this
        node's schema version, or after ``schema_agreement_timeout_ms``, with the warning for
        the answer if agreement was not reached, else None. The node answers as soon as gossip
        brings agreement (``ClusterNode.await_schema_agreement``): nothing polls, no thread
        waits. InternalError if the node does not answer in that time plus a margin."""
        timeout_ms = self._node.settings.schema_agreement_timeout_ms
        found: concurrent.futures.Future[str | None] = concurrent.futures.Future()

        def start() -> None:  # on the event loop
            def expire() -> None:
                if not found.done():
                    message = f"schema agreement: the node did not answer in {timeout_ms} ms"
                    found.set_exception(InternalError(message))

            deadline = self._loop.call_later(timeout_ms / 1000 + _MARGIN_S, expire)

            def done(disagreeing: dict[str, str | None]) -> None:
                deadline.cancel()
                if not found.done():
                    warning = agreement_warning(timeout_ms, disagreeing) if disagreeing else None
                    found.set_result(warning)

            self._node.await_schema_agreement(timeout_ms, done)

        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError as closed:  # the node is shutting down
            found.set_exception(closed)
        return found

    def close(self) -> None:
        """Nothing to release: a coordinated read holds its partitions in memory only."""
        self._held.clear()


class CoordinatedReader:
    """A SELECT's rows, read through the coordinator (module docstring): one per statement,
    used by one thread at a time. It holds the partition slices the statement read (a resumed
    read inside one is answered from it; as many as the statement's partition keys and
    clustering slices, which ``ExecutorLimits`` bound) and the range chunks of its scan.

    A slice or chunk not held is noted (:meth:`take_missing`) and read as empty, for the plane
    to read them all and run the statement again; once ``suspending`` (a SELECT in steps, past
    its first run) it is ``RowsNotHeld`` instead, for the plane to read it and go on from
    there, and a scan then holds one chunk at a time."""

    def __init__(self, plane: ClusterDataPlane, local: Store, consistency: Consistency) -> None:
        self._plane = plane
        self._local = local
        self.consistency = consistency
        self.suspending = False
        self.reads_store = False
        """A run read the local store (a node-local table, or a local read at ONE): its next
        run goes on the statement thread, never on the event loop."""
        self._slices: dict[_PartitionKey, list[_Held]] = {}
        self._chunks: dict[tuple[str, str, int, int, int | None], _HeldChunk] = {}
        self._missing: dict[object, _Read] = {}
        self.held_bytes = 0
        """The estimated size of the partitions held (slices and chunks), at most
        ``StoreLimits.max_held_read_bytes``."""
        self._chunk_bytes = 0

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
            self.consistency in _ONE and self._plane.serves_locally(table, partition_key)
        ):
            self.reads_store = True
            read = functools.partial(self._local.read_partition, table, partition_key)
        else:
            held = self._plane.held_table(table)
            key = tuple(partition_key)
            low, high = held.interval(start, end)
            found = self._holding(table, key, low, high)
            if found is None:
                lacking = (table, key, start, end)
                if self.suspending:
                    raise RowsNotHeld([lacking])
                self._missing.setdefault((table.keyspace, table.name, key, start, end), lacking)
                return []  # this run's answer is not sent: the statement runs again
            read = functools.partial(held.read_partition, found[2])
        return read(
            start=start, end=end, columns=columns, reverse=reverse, limit=limit, now_s=now_s
        )

    def _holding(
        self, table: Table, partition_key: tuple[bytes, ...], low: bytes, high: bytes
    ) -> _Held | None:
        """A slice held that holds ``[low, high)`` of the partition, or None."""
        for held in self._slices.get((table.keyspace, table.name, partition_key), ()):
            if held[0] <= low and high <= held[1]:
                return held
        return None

    def take_missing(self) -> list[_Read]:
        """The slices and chunks the runs since the last call lacked; then forgotten."""
        missing = list(self._missing.values())
        self._missing.clear()
        return missing

    def hold(self, reads: Sequence[_Read], found: Sequence[_Found]) -> None:
        """Hold what each of ``reads`` found: a slice's reconciled partition (None: nothing
        there), a chunk's partitions and the last token it covered."""
        for read, result in zip(reads, found, strict=True):
            if isinstance(read, _ChunkRead):
                assert isinstance(result, tuple)
                self._hold_chunk(read, *result)
            else:
                assert not isinstance(result, tuple)
                table, partition_key, start, end = read
                self._hold(table, partition_key, start, end, result)

    def _hold(
        self,
        table: Table,
        partition_key: tuple[bytes, ...],
        start: ClusteringBound,
        end: ClusteringBound,
        partition: Mutation | None,
    ) -> _Held:
        held = self._plane.held_table(table)
        low, high = held.interval(start, end)
        if partition is not None:
            self._count(mutation_size(partition).size_bytes)
        entry = (low, high, None if partition is None else held.hold(partition))
        self._slices.setdefault((table.keyspace, table.name, partition_key), []).append(entry)
        return entry

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
            self.reads_store = True
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
            chunk = self._chunk_of(_ChunkRead(table, low, end_token_inclusive, limit))
            if chunk is None:
                return ScanPage([], None)  # this run's answer is not sent
            last = chunk.high == end_token_inclusive
            high = chunk.high
        else:
            chunk = self._chunk_of(_ChunkRead(table, low, high, None))
            if chunk is None:
                return ScanPage([], None)
        page = held.scan(
            chunk.partitions,
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

    def _chunk_of(self, read: _ChunkRead) -> _HeldChunk | None:
        """The chunk ``read`` names, held; None when it is noted missing."""
        found = self._chunks.get(read.key)
        if found is not None:
            return found
        if self.suspending:  # the scan has moved on: the chunks it leaves are not read again
            self._chunks.clear()
            self.held_bytes -= self._chunk_bytes
            self._chunk_bytes = 0
            raise RowsNotHeld([read])
        self._missing.setdefault(read.key, read)
        return None

    def _hold_chunk(
        self, read: _ChunkRead, partitions: Sequence[Mutation], covered: int | None
    ) -> _HeldChunk:
        """Hold a chunk's partitions: ``(low, high]``, ``high`` what the read covered (the end
        of the range when it covered all of it); a first chunk also as the chunk it is."""
        held = self._plane.held_table(read.table)
        high = read.high if covered is None else covered
        size = sum(mutation_size(partition).size_bytes for partition in partitions)
        self._count(size)
        self._chunk_bytes += size
        chunk = _HeldChunk([held.hold(partition) for partition in partitions], high)
        self._chunks[read.key] = chunk
        if read.limit is not None:
            self._chunks[_ChunkRead(read.table, read.low, high, None).key] = chunk
        return chunk

    def _count(self, size: int) -> None:
        """Hold ``size`` more bytes, or refuse the statement if that is over the limit."""
        limit = self.limits.max_held_read_bytes
        if self.held_bytes + size > limit:
            raise ResultTooLarge(
                f"the SELECT would hold {self.held_bytes + size} bytes of partitions read "
                f"through the coordinator, more than {limit} (max_held_read_bytes): narrow "
                "its clustering range, or ask for fewer partitions at once"
            )
        self.held_bytes += size


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
