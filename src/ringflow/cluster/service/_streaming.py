"""Range streaming between cluster nodes: raw partitions of token ranges, paged and bounded.

cassandra-core.md §8 (bootstrap and decommission stream the moving ranges); the unit moved is a
stored partition as ``Store.scan_mutations`` returns it (cells with their timestamps and TTLs,
row, range and partition tombstones), never a query result, and it is applied with
``Store.apply`` (merging by timestamp, so a partition streamed twice, or one also written by a
client meanwhile, converges) with origin STREAM: the CDC log rows it brings go to the replica's
capture out of sequence (seed 002).

Wire (verb STREAM_REQ, answers STREAM_RSP, failures FAILURE_RSP ``[STREAM_REQ, reason]``):

* ``["pull", keyspace, table, low, high, paging state | nil, page size]``: the source answers
  ``["page", paging state | nil, [mutation bytes...]]`` with at most ``page size`` partitions of
  ``(low, high]`` (and at most ``PAGE_BYTES_MAX`` bytes; nil state: the range is finished).
* ``["push", keyspace, table, [mutation bytes...]]``: the target applies them and answers
  ``["ack"]``.
* ``["restream", host id]`` (``removenode``): the receiver pulls every range it gains from the
  removal of that dead node from surviving replicas, and answers ``["ack"]`` once done.

``Streamer.run`` moves a list of ``StreamTask``s in one session per peer (the source pulled
from, or the target pushed to), the sessions at once, as Cassandra's ``StreamPlan`` runs one
``StreamSession`` per peer concurrently: a lost message stalls only its session for its timeout,
not the whole bootstrap (topology seed 340 of the wide scenario: with 5% of messages dropped,
one page in flight for the whole plan made every join spend minutes in timeouts). A session
moves its tasks one page at a time (one request in flight per peer: bounded memory on both
ends), every table of each task's keyspace, in order; a page that is not answered within
``REQUEST_TIMEOUT_FACTOR`` read timeouts or fails is retried ``MAX_ATTEMPTS`` times with
backoff, then its session fails, and the run reports the first failure once every session has
ended. CDC log tables are streamed like their base tables: their token is the stream id's
(``CDCPartitioner``), the range pieces the same.

Checks (issue 16): a pull or push of a local system keyspace (``system``, ``system_schema``),
or a push of a table this node does not know, is refused whole (``peer_write_refusal``); an
answer counts only from the peer the request went to (a STREAM_RSP from anyone else with the
same request id is refused and leaves the request waiting for its real answer).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgpack

from ringflow.cluster._messages import InternodeProtocolError, Verb
from ringflow.cluster._topology_change import StreamTask
from ringflow.cluster.service._codec import _int, _list, _mutation, _unpack
from ringflow.cluster.service._dispatch import peer_write_refusal
from ringflow.cluster.service._node import ClusterNode
from ringflow.replication import Origin
from ringflow.schema import Mutation
from ringflow.storage import Store, encode_mutation

_log = logging.getLogger(__name__)

PAGE_PARTITIONS = 512
PAGE_BYTES_MAX = 8 * 1024 * 1024
REQUEST_TIMEOUT_FACTOR = 2
"""A page not answered within this many read timeouts is asked again."""
MAX_ATTEMPTS = 6
RESTREAM_TIMEOUT_MS = 30 * 60_000
_REQUEST_IDS = 3 << 61
LOCAL_KEYSPACES = frozenset({"system", "system_schema"})
"""Never streamed: each node's own tables."""


# --- codec ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    keyspace: str
    table: str
    low: int
    high: int
    paging_state: bytes | None
    page_size: int


@dataclass(frozen=True, slots=True)
class PushRequest:
    keyspace: str
    table: str
    partitions: tuple[Mutation, ...]


@dataclass(frozen=True, slots=True)
class RestreamRequest:
    host_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Page:
    paging_state: bytes | None
    partitions: tuple[Mutation, ...]


def _encoded(partitions: Sequence[Mutation]) -> list[bytes]:
    return [encode_mutation(partition) for partition in partitions]


def encode_pull(request: PullRequest) -> bytes:
    body = ["pull", request.keyspace, request.table, request.low, request.high]
    body += [request.paging_state, request.page_size]
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return payload


def encode_push(request: PushRequest) -> bytes:
    body = ["push", request.keyspace, request.table, _encoded(request.partitions)]
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    return payload


def encode_page(page: Page) -> bytes:
    payload: bytes = msgpack.packb(
        ["page", page.paging_state, _encoded(page.partitions)], use_bin_type=True
    )
    return payload


ACK = msgpack.packb(["ack"], use_bin_type=True)


def _state(value: object) -> bytes | None:
    if value is not None and not isinstance(value, bytes):
        raise InternodeProtocolError(f"stream: bad paging state {value!r:.40}")
    return value


def _names(keyspace: object, table: object) -> tuple[str, str]:
    if not isinstance(keyspace, str) or not isinstance(table, str):
        raise InternodeProtocolError(f"stream: bad table {keyspace!r:.40} {table!r:.40}")
    return keyspace, table


def _partitions(value: object) -> tuple[Mutation, ...]:
    return tuple(_mutation(item, "stream") for item in _list(value, "stream partitions"))


def encode_restream(request: RestreamRequest) -> bytes:
    payload: bytes = msgpack.packb(["restream", str(request.host_id)], use_bin_type=True)
    return payload


def decode_stream_message(
    data: bytes,
) -> PullRequest | PushRequest | RestreamRequest | Page | None:
    """A STREAM_REQ/STREAM_RSP payload (None: an ack)."""
    value = _list(_unpack(data, "stream"), "stream")
    kind = value[0] if value else None
    if kind == "pull":
        _, keyspace, table, low, high, state, size = _list(value, "stream pull", 7)
        low, high, size = _int(low, "low"), _int(high, "high"), _int(size, "page size")
        if not -(2**63) <= low < high < 2**63 or size < 1:
            raise InternodeProtocolError(f"stream pull: bad range ({low}, {high}] page {size}")
        return PullRequest(*_names(keyspace, table), low, high, _state(state), size)
    if kind == "push":
        _, keyspace, table, items = _list(value, "stream push", 4)
        return PushRequest(*_names(keyspace, table), _partitions(items))
    if kind == "page":
        _, state, items = _list(value, "stream page", 3)
        return Page(_state(state), _partitions(items))
    if kind == "restream":
        _, host_id = _list(value, "stream restream", 2)
        try:
            return RestreamRequest(uuid.UUID(str(host_id)))
        except ValueError:
            raise InternodeProtocolError(f"stream restream: bad host id {host_id!r:.40}") from None
    if kind == "ack":
        return None
    raise InternodeProtocolError(f"stream: unknown message {value!r:.80}")


# --- the shell ------------------------------------------------------------------------------------


@dataclass(slots=True)
class StreamStats:
    partitions: int = 0
    pages: int = 0
    bytes: int = 0


StreamDone = Callable[[StreamStats, BaseException | None], None]


@dataclass(slots=True)
class _Run:
    """A ``Streamer.run`` in progress: the (task, table) steps and where the current one is."""

    steps: list[tuple[StreamTask, str]]
    done: StreamDone
    stats: StreamStats = field(default_factory=StreamStats)
    index: int = 0
    paging_state: bytes | None = None
    attempts: int = 0
    request_id: int = 0
    pushed: tuple[Mutation, ...] = ()


Restream = Callable[[uuid.UUID, Callable[[BaseException | None], None]], None]
"""Pull what this node gains from removing a host (its id), then call back (error or None)."""


class StreamError(RuntimeError):
    """A stream run gave up (a source or target kept failing or not answering)."""


class Streamer:
    """Serves STREAM_REQ on ``cluster`` and runs stream plans (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        *,
        page_partitions: int = PAGE_PARTITIONS,
        on_restream: Restream | None = None,
    ) -> None:
        self.cluster = cluster
        self.page_partitions = page_partitions
        self._runs: dict[int, _Run] = {}
        self._pending_state: dict[int, bytes | None] = {}
        """A push in flight: the paging state after the page it carries."""
        self._waiters: dict[int, Callable[[BaseException | None], None]] = {}
        self._waiter_endpoints: dict[int, str] = {}
        """``request_restream`` calls waiting for their answer, by request id."""
        self._on_restream = _no_restream if on_restream is None else on_restream
        """Pulls what this node gains from a removal, asked by the removal's coordinator."""
        self._next_id = _REQUEST_IDS
        self._active: list[_Run] = []
        """The sessions of the runs in progress (``progress``)."""
        cluster.serve(
            {Verb.STREAM_REQ: self._on_request, Verb.STREAM_RSP: self._on_response},
            on_failure={Verb.STREAM_REQ: self._on_failure},
        )

    def tables_of(self, keyspace: str) -> list[str]:
        """Every table of ``keyspace`` in the local store (CDC log tables included)."""
        return sorted(t.name for t in self.cluster.store.tables() if t.keyspace == keyspace)

    # -- serving --------------------------------------------------------------------------

    def _on_request(self, source: str, request_id: int, payload: bytes) -> None:
        message = decode_stream_message(payload)
        store, cluster = self.cluster.store, self.cluster
        refusal = _request_refusal(store, message)
        if refusal is not None:
            cluster.refuse(source, request_id, Verb.STREAM_REQ, refusal)
            return

        def answer(body: bytes | None, error: BaseException | None) -> None:
            if error is None and body is not None:
                cluster.messenger.send(source, Verb.STREAM_RSP, request_id, body)
            else:
                cluster.messenger.fail(source, request_id, Verb.STREAM_REQ, f"{error}")

        if isinstance(message, PullRequest):
            request = message

            def serve() -> bytes:
                size = max(1, min(request.page_size, store.limits.max_page_size_rows))
                page = store.scan_mutations(
                    (request.keyspace, request.table),
                    request.low,
                    request.high,
                    page_size=size,
                    paging_state=request.paging_state,
                )
                return encode_page(Page(page.paging_state, tuple(page.mutations)))

            cluster.offload(serve, answer)
        elif isinstance(message, RestreamRequest):

            def finished(error: BaseException | None) -> None:
                answer(None if error is not None else bytes(ACK), error)

            self._on_restream(message.host_id, finished)
        elif isinstance(message, PushRequest):
            partitions = list(message.partitions)

            def apply() -> bytes:
                if partitions:
                    store.apply(
                        partitions, now_s=cluster.clock.now_ms() // 1000, origin=Origin.STREAM
                    )
                return bytes(ACK)

            cluster.offload(apply, answer)
        else:
            raise InternodeProtocolError("stream: an answer sent as a request")

    # -- running a plan -------------------------------------------------------------------

    def run(self, tasks: Sequence[StreamTask], done: StreamDone) -> None:
        """Move every task's ranges, every table of its keyspace, in one session per peer run
        at once; ``done(stats, error)`` once every session ended (the first error, if any)."""
        sessions: dict[str, list[tuple[StreamTask, str]]] = {}
        for task in tasks:
            peer = task.target if task.source == self.cluster.host else task.source
            steps = sessions.setdefault(peer.endpoint, [])
            steps += [(task, table) for table in self.tables_of(task.keyspace)]
        if not sessions:
            done(StreamStats(), None)
            return
        total = StreamStats()
        errors: list[BaseException] = []
        waiting = [len(sessions)]

        def session_done(stats: StreamStats, error: BaseException | None) -> None:
            total.partitions += stats.partitions
            total.pages += stats.pages
            total.bytes += stats.bytes
            if error is not None:
                errors.append(error)
            waiting[0] -= 1
            if waiting[0] == 0:
                self._active = [r for r in self._active if r.done is not session_done]
                done(total, errors[0] if errors else None)

        runs = [_Run(steps, session_done) for _peer, steps in sorted(sessions.items())]
        self._active += runs
        for run in runs:
            self._step(run)

    def progress(self) -> StreamStats:
        """What the sessions of the runs in progress moved so far (for the node's status)."""
        moved = StreamStats()
        for run in self._active:
            moved.partitions += run.stats.partitions
            moved.pages += run.stats.pages
            moved.bytes += run.stats.bytes
        return moved

    def _step(self, run: _Run) -> None:
        if run.index >= len(run.steps):
            run.done(run.stats, None)
            return
        task, table = run.steps[run.index]
        self._next_id += 1
        run.request_id = self._next_id
        self._runs[run.request_id] = run
        request_id = run.request_id
        timeout_ms = REQUEST_TIMEOUT_FACTOR * self.cluster.settings.read_timeout_ms
        self.cluster.clock.call_later(timeout_ms, lambda: self._timed_out(request_id))
        if task.source == self.cluster.host:
            self._push_next(run, task, table)
        else:
            request = PullRequest(
                task.keyspace, table, task.low, task.high, run.paging_state, self.page_partitions
            )
            if not self.cluster.messenger.send(
                task.source.endpoint, Verb.STREAM_REQ, request_id, encode_pull(request)
            ):
                self._retry(run, "send failed")

    def _push_next(self, run: _Run, task: StreamTask, table: str) -> None:
        """Scan the next local page and push it to ``task.target``."""
        store, request_id = self.cluster.store, run.request_id

        def scan() -> tuple[tuple[Mutation, ...], bytes | None]:
            page = store.scan_mutations(
                (task.keyspace, table),
                task.low,
                task.high,
                page_size=self.page_partitions,
                paging_state=run.paging_state,
            )
            return tuple(page.mutations), page.paging_state

        def scanned(
            result: tuple[tuple[Mutation, ...], bytes | None] | None, error: BaseException | None
        ) -> None:
            if run.request_id != request_id:
                return
            if error is not None or result is None:
                self._give_up(run, StreamError(f"local scan failed: {error}"))
                return
            partitions, state = result
            run.pushed = partitions
            body = encode_push(PushRequest(task.keyspace, table, partitions))
            run.stats.bytes += len(body)
            self._pending_state[request_id] = state
            if not self.cluster.messenger.send(
                task.target.endpoint, Verb.STREAM_REQ, request_id, body
            ):
                self._retry(run, "send failed")

        self.cluster.offload(scan, scanned)

    def request_restream(
        self, endpoint: str, host_id: uuid.UUID, done: Callable[[BaseException | None], None]
    ) -> None:
        """Ask ``endpoint`` to restream what it gains from removing ``host_id``."""
        self._next_id += 1
        request_id = self._next_id
        self._waiters[request_id] = done
        self._waiter_endpoints[request_id] = endpoint

        def timed_out() -> None:
            self._waiter_endpoints.pop(request_id, None)
            waiter = self._waiters.pop(request_id, None)
            if waiter is not None:
                waiter(StreamError(f"{endpoint} did not finish restreaming in time"))

        self.cluster.clock.call_later(RESTREAM_TIMEOUT_MS, timed_out)
        body = encode_restream(RestreamRequest(host_id))
        if not self.cluster.messenger.send(endpoint, Verb.STREAM_REQ, request_id, body):
            self._waiter_endpoints.pop(request_id, None)
            self._waiters.pop(request_id, None)
            done(StreamError(f"could not reach {endpoint}"))

    def _expected_peer(self, request_id: int) -> str | None:
        """The endpoint request ``request_id`` went to, if it is still waiting."""
        if request_id in self._waiters:
            return self._waiter_endpoints.get(request_id)
        run = self._runs.get(request_id)
        if run is None:
            return None
        task, _table = run.steps[run.index]
        peer = task.target if task.source == self.cluster.host else task.source
        return peer.endpoint

    def _on_response(self, source: str, request_id: int, payload: bytes) -> None:
        expected = self._expected_peer(request_id)
        if expected is None:
            return
        if source != expected:
            self.cluster.refuse(source, request_id, Verb.STREAM_RSP, f"asked {expected}")
            return
        message = decode_stream_message(payload)
        self._waiter_endpoints.pop(request_id, None)
        waiter = self._waiters.pop(request_id, None)
        if waiter is not None:
            waiter(None)
            return
        run = self._runs.pop(request_id)
        task, table = run.steps[run.index]
        if message is None:  # a push was applied
            state = self._pending_state.pop(request_id, None)
            run.stats.partitions += len(run.pushed)
            run.stats.pages += 1
            run.pushed = ()
            self._advance(run, state)
            return
        if not isinstance(message, Page):
            self._give_up(run, StreamError(f"unexpected stream answer from {source}"))
            return
        page = message
        run.stats.bytes += len(payload)
        store, cluster = self.cluster.store, self.cluster

        def apply() -> None:
            if page.partitions:
                store.apply(
                    list(page.partitions),
                    now_s=cluster.clock.now_ms() // 1000,
                    origin=Origin.STREAM,
                )

        def applied(_result: object, error: BaseException | None) -> None:
            if error is not None:
                self._give_up(
                    run, StreamError(f"applying streamed {task.keyspace}.{table}: {error}")
                )
                return
            run.stats.partitions += len(page.partitions)
            run.stats.pages += 1
            self._advance(run, page.paging_state)

        self.cluster.offload(apply, applied)

    def _advance(self, run: _Run, state: bytes | None) -> None:
        run.attempts = 0
        run.paging_state = state
        if state is None:
            run.index += 1
        self._step(run)

    def _on_failure(self, source: str, request_id: int, reason: str) -> None:
        if source != self._expected_peer(request_id):
            return
        self._waiter_endpoints.pop(request_id, None)
        waiter = self._waiters.pop(request_id, None)
        if waiter is not None:
            waiter(StreamError(f"{source}: {reason}"))
            return
        run = self._runs.pop(request_id, None)
        if run is not None:
            self._retry(run, reason)

    def _timed_out(self, request_id: int) -> None:
        run = self._runs.pop(request_id, None)
        if run is not None:
            self._retry(run, "no answer")

    def _retry(self, run: _Run, reason: str) -> None:
        self._runs.pop(run.request_id, None)
        self._pending_state.pop(run.request_id, None)
        run.request_id = 0
        run.attempts += 1
        task, table = run.steps[run.index]
        if run.attempts >= MAX_ATTEMPTS:
            self._give_up(run, StreamError(f"streaming {task.keyspace}.{table} failed: {reason}"))
            return
        _log.info("streaming %s.%s: %s; retrying", task.keyspace, table, reason)
        delay_ms = min(5_000, 200 * 2**run.attempts)
        self.cluster.clock.call_later(delay_ms, lambda: self._step(run))

    def _give_up(self, run: _Run, error: BaseException) -> None:
        self._runs.pop(run.request_id, None)
        run.request_id = 0
        run.done(run.stats, error)


def _request_refusal(
    store: Store, message: PullRequest | PushRequest | RestreamRequest | Page | None
) -> str | None:
    """Why a peer's stream request may not be served here (module docstring), or None."""
    if isinstance(message, PullRequest) and message.keyspace in LOCAL_KEYSPACES:
        return f"{message.keyspace} is local to each node"
    if isinstance(message, PushRequest):
        return peer_write_refusal(store, message.partitions)
    return None


def _no_restream(host_id: uuid.UUID, done: Callable[[BaseException | None], None]) -> None:
    done(StreamError("this node does not restream"))
