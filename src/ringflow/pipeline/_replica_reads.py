"""Node-local reads of replica-side capture: one node's own copy of a slice, over CQL.

A node answers ``system_replication.captured_rows`` and ``system_replication.local_slices`` from
its own capture only (node-local virtual tables), so every read here goes through a driver
session *pinned* to that node (a whitelist of one host: the request never goes elsewhere, and
fails when the node is down). Used by the ``ringflow-replica`` source on the executors (the rows
of a copy) and by the job's coordinator on the driver (a copy's row digests, the slice starts a
node holds).

A copy is read in pages by arrival sequence (``seq > ? LIMIT ?``, ``page_rows`` a page; the
first pages of up to ``in_flight`` copies asked for at once), each row checked against its
digest, and the whole checked against what the node published for it
(:func:`check_copy`: the row count and the slice digest over the sorted row digests): the rows
handed on are exactly the copy, or :class:`ReplicaReadError` is raised. A copy the node dropped,
or a node that is down, is an error too, never fewer rows.

Sessions are kept per node address in each process (at most ``MAX_PINNED_SESSIONS``, the oldest
shut down first), with no schema or token metadata (a read needs neither). A node of an edge
with auth and TLS is reached as the job reaches the edge: ``NodeAddress`` carries the login
(the password out of its repr) and the TLS files (issue 18).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cassandra import ConsistencyLevel
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    ResponseFuture,
    Session,
)
from cassandra.policies import ExponentialReconnectionPolicy, WhiteListRoundRobinPolicy
from cassandra.query import tuple_factory

from ringflow.pipeline._cluster_client import (
    DriverTls,
    auth_provider,
    keep_session_cache,
    prepared,
    shut_down_sessions,
)
from ringflow.pipeline._replica_offsets import ReplicaReadError
from ringflow.replication import (
    CAPTURED_ROWS_TABLE,
    LOCAL_SLICES_TABLE,
    REPLICATION_KEYSPACE,
    PlannedSend,
    canonical_digest,
    slice_digest,
)

MAX_PINNED_SESSIONS: Final = 16
DEFAULT_PAGE_ROWS: Final = 1000
MAX_PAGE_ROWS: Final = 50_000
DEFAULT_IN_FLIGHT: Final = 16
CAPTURED_ROWS: Final = f"{REPLICATION_KEYSPACE}.{CAPTURED_ROWS_TABLE}"
LOCAL_SLICES: Final = f"{REPLICATION_KEYSPACE}.{LOCAL_SLICES_TABLE}"
_COPY_WHERE = (
    "WHERE keyspace_name = ? AND table_name = ? AND slice_start_ms = ? AND range_start = ? "
    "AND range_end = ? AND out_of_sequence = ? AND seq > ? LIMIT ?"
)
ROWS_QUERY: Final = f"SELECT seq, row_digest, row FROM {CAPTURED_ROWS} {_COPY_WHERE}"
DIGESTS_QUERY: Final = f"SELECT seq, row_digest FROM {CAPTURED_ROWS} {_COPY_WHERE}"
LOCAL_SLICES_QUERY: Final = (
    f"SELECT slice_start_ms FROM {LOCAL_SLICES} WHERE keyspace_name = ? AND table_name = ?"
)


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """Where one node listens, and the bounds of a request to it (picklable)."""

    address: str
    port: int = 9042
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: DriverTls | None = None
    """The edge's TLS (its CA, a client certificate when required): paths, picklable."""


class _PinnedSessions:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[NodeAddress, tuple[Cluster, Session]] = {}


_PINNED = _PinnedSessions()


def _connect(node: NodeAddress) -> tuple[Cluster, Session]:
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([node.address]),
        request_timeout=node.request_timeout_s,
        consistency_level=ConsistencyLevel.ONE,
        row_factory=tuple_factory,
    )
    cluster = Cluster(
        [node.address],
        port=node.port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=node.connect_timeout_s,
        control_connection_timeout=node.connect_timeout_s,
        schema_metadata_enabled=False,
        token_metadata_enabled=False,
        reconnection_policy=ExponentialReconnectionPolicy(0.5, 10.0),
        auth_provider=auth_provider(node.username, node.password),
        ssl_context=None if node.tls is None else node.tls.context(),
    )
    try:
        return cluster, cluster.connect()
    except Exception as error:  # NoHostAvailable, OSError...: the node is not there
        cluster.shutdown()
        raise ReplicaReadError(f"replica read: node {node.address} unreachable: {error}") from None


def pinned_session(node: NodeAddress) -> Session:
    """This process's session pinned to ``node`` (made on first use; module docstring)."""
    with _PINNED.lock:
        entry = _PINNED.sessions.get(node)
        if entry is not None and not entry[0].is_shutdown:
            return entry[1]
    fresh = _connect(node)
    stale: list[tuple[Cluster, Session]] = []
    with _PINNED.lock:
        if node in _PINNED.sessions:
            stale.append(_PINNED.sessions.pop(node))
        while len(_PINNED.sessions) >= MAX_PINNED_SESSIONS:
            stale.append(_PINNED.sessions.pop(next(iter(_PINNED.sessions))))
        _PINNED.sessions[node] = fresh
    for cluster, _ in stale:
        cluster.shutdown()
    return fresh[1]


def forget_pinned(node: NodeAddress) -> None:
    """Shut ``node``'s session down (after an error: the next read connects afresh)."""
    with _PINNED.lock:
        entry = _PINNED.sessions.pop(node, None)
    if entry is not None:
        entry[0].shutdown()


keep_session_cache(lambda: shut_down_sessions(_PINNED.lock, _PINNED.sessions))


def _values(copy: PlannedSend, after: int, limit: int) -> tuple[object, ...]:
    key = copy.key
    return (
        key.keyspace,
        key.table,
        key.slice_start_ms,
        key.range_start,
        key.range_end,
        key.out_of_sequence,
        after,
        limit,
    )


def _copy_pages(
    session: Session, query: str, copies: Sequence[PlannedSend], page_rows: int, in_flight: int
) -> Iterator[tuple[PlannedSend, Iterator[tuple[Any, ...]]]]:
    """Each copy with its rows, in order: the first pages of up to ``in_flight`` copies are
    asked for at once (most copies are one page), later pages as the rows are consumed."""
    statement = prepared(session, query)
    limit = max(1, min(page_rows, MAX_PAGE_ROWS))
    pending: deque[tuple[PlannedSend, ResponseFuture]] = deque()
    remaining = iter(copies)

    def issue() -> None:
        copy = next(remaining, None)
        if copy is not None:
            pending.append((copy, session.execute_async(statement, _values(copy, -1, limit))))

    for _ in range(max(1, in_flight)):
        issue()
    while pending:
        copy, future = pending.popleft()
        first = list(future.result())
        issue()
        yield copy, _rest(session, statement, copy, first, limit)


def _rest(
    session: Session, statement: Any, copy: PlannedSend, rows: list[Any], limit: int
) -> Iterator[tuple[Any, ...]]:
    after = -1
    while True:
        for row in rows:
            if row[0] <= after:
                raise ReplicaReadError(
                    f"replica read of {copy.key}: seq {row[0]} after {after} (not in order)"
                )
            after = row[0]
            yield row
        if len(rows) < limit:
            return
        rows = list(session.execute(statement, _values(copy, after, limit)))


def check_copy(copy: PlannedSend, digests: list[int], where: str) -> None:
    """The rows read (their digests) are exactly the published copy: ReplicaReadError if not."""
    if len(digests) != copy.row_count or slice_digest(digests) != copy.digest:
        raise ReplicaReadError(
            f"replica read of {copy.key} from {where}: {len(digests)} rows whose slice digest "
            f"is {slice_digest(digests).hex()}, but the copy is {copy.row_count} rows with "
            f"digest {copy.digest.hex()} (dropped or changed since it was published)"
        )


def copy_rows(
    node: NodeAddress,
    copies: Sequence[PlannedSend],
    page_rows: int = DEFAULT_PAGE_ROWS,
    in_flight: int = DEFAULT_IN_FLIGHT,
) -> Iterator[bytes]:
    """The canonical rows of ``copies`` as ``node`` holds them, copy after copy, each row in
    arrival order and checked against its digest; ReplicaReadError (after a copy's last row)
    unless they are exactly that copy, or when the node goes away. A kept session that fails
    before the first row (its node restarted since) is replaced once."""
    for attempt in (1, 2):
        yielded = 0
        copy = None
        try:
            session = pinned_session(node)
            for copy, rows in _copy_pages(session, ROWS_QUERY, copies, page_rows, in_flight):
                digests: list[int] = []
                for _, digest, data in rows:
                    data = bytes(data)
                    if canonical_digest(data) != digest:
                        raise ReplicaReadError(
                            f"replica read of {copy.key}: a row fails its digest"
                        )
                    digests.append(digest)
                    yielded += 1
                    yield data
                check_copy(copy, digests, node.address)
            return
        except ReplicaReadError:
            raise
        except Exception as error:  # the driver's: the node went away (mid-read)
            forget_pinned(node)
            if attempt == 1 and yielded == 0:
                continue
            what = copy.key if copy is not None else "a batch"
            raise ReplicaReadError(
                f"replica read of {what} from {node.address}: {type(error).__name__}: {error}"
            ) from None


def copy_digests(
    node: NodeAddress,
    copies: Sequence[PlannedSend],
    page_rows: int = 10 * DEFAULT_PAGE_ROWS,
    in_flight: int = DEFAULT_IN_FLIGHT,
) -> list[list[int]]:
    """The row digests of each of ``copies`` on ``node`` (checked as :func:`copy_rows` does;
    a kept session that fails is replaced once)."""
    for attempt in (1, 2):
        found: list[list[int]] = []
        try:
            session = pinned_session(node)
            for copy, rows in _copy_pages(session, DIGESTS_QUERY, copies, page_rows, in_flight):
                digests = [int(row[1]) for row in rows]
                check_copy(copy, digests, node.address)
                found.append(digests)
            return found
        except ReplicaReadError:
            raise
        except Exception as error:
            forget_pinned(node)
            if attempt == 1:
                continue
            raise ReplicaReadError(
                f"replica read from {node.address}: {type(error).__name__}: {error}"
            ) from None
    raise ReplicaReadError(f"replica read from {node.address}: no attempt left")  # unreachable


def held_slice_starts(node: NodeAddress, keyspace: str, table: str) -> set[int]:
    """The slice starts of ``keyspace.table`` that ``node`` still holds (``local_slices``, one
    partition, paged by the driver)."""
    try:
        session = pinned_session(node)
        rows = session.execute(prepared(session, LOCAL_SLICES_QUERY), (keyspace, table))
        return {int(row[0]) for row in rows}
    except Exception as error:
        forget_pinned(node)
        raise ReplicaReadError(
            f"local slices of {node.address}: {type(error).__name__}: {error}"
        ) from None
