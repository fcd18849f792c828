"""The coordinator of replica-side transmission, in the job's driver process (seed 002).

One per job. It decides which copy of which sealed slice each channel transmits and hands the
copies to the channels' ``ringflow-replica`` sources (:mod:`._replica_source`) over a loopback
RPC (:mod:`._replica_rpc`). REPLICATION.md decisions 5-8.

**Rounds** (a planning thread, about every ``round_interval_s`` and soon after a commit): read
the hosts and their liveness, per table the slice starts the live nodes still hold
(``local_slices``), then for the starts still open for decision the published copies
(``slices``), the seal watermarks and the ``sent`` records; run ``replication.plan_sends`` with
everything in flight (the broker's grants and the ledger's reserved batches); offer each
channel its sends and let the ``PermitBroker`` grant the free permits (priority, fifo/lifo).

**Bounded reads.** Per channel a cursor: the held slice starts it has not finished, at most
``max_starts_per_round`` of them a round in its order (fifo oldest first, lifo newest first). A
start is finished for a channel when every live copy there is done for it (sent, or its digest
sent) and every live node's watermark has passed the start's slices; this is remembered with
the nodes that held the start then, so it is looked at again only when another node turns up
holding it (a node back from the dead). The sent records this job wrote are kept for the held
starts, so a round that read ``sent`` just before a commit still sees that commit.

**Serving the sources** (:meth:`ReplicaCoordinator.handle`):

- ``latest(channel, start, wait_s)``: the batch that ended at ``start`` is committed (Spark asks
  only then; :mod:`._replica_ledger`), its ``sent`` rows are written at QUORUM, and the
  channel's ready copies become its next offset. In ``once`` mode the call waits (bounded) for
  copies or for the channel to be done, since an unchanged offset ends a Spark
  ``availableNow`` run.
- ``resolve(channel, offset)``: where to read each copy: its node if live, else any live node
  that published the same digest for the key (the same rows), else its node (the read fails,
  and the batch with it). The copy's row digests are read from there (for the unique count).
- ``commit(channel, offset)``: a commit reported by the source or the runner; idempotent.

**Once**: a run that ends at ``once_until_ms`` (the job's start) delivers every copy of a slice
due to seal by then, once every live node's watermark has passed it; later slices wait for the
next run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ringflow.pipeline._replica_ledger import Commit, Ledger
from ringflow.pipeline._replica_offsets import CoordinatorError, ReplicaOffset, ReplicaReadError
from ringflow.pipeline._replica_rpc import RpcServer, new_token
from ringflow.pipeline._replica_view import ClusterView
from ringflow.replication import (
    DEFAULT_PERMITS,
    Channel,
    ChannelOrder,
    PermitBroker,
    PlannedSend,
    ReplicasOf,
    SealedSlice,
    SealWatermark,
    SentIndex,
    SentRecord,
    SliceKey,
    SliceSettings,
    due_ms,
    plan_sends,
    seal_due_ms,
)

DEFAULT_MAX_STARTS_PER_ROUND: Final = 32
DEFAULT_MAX_COPIES_PER_BATCH: Final = 256
DEFAULT_ROUND_INTERVAL_S: Final = 1.0
MIN_ROUND_SPACING_S: Final = 0.5
CHANNEL_REFRESH_ROUNDS: Final = 10
MAX_LATEST_WAIT_S: Final = 30.0
_LOG = logging.getLogger("ringflow.replica")

Clock = Callable[[], int]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _StartState:
    """A held slice start, as a channel last judged it: the live nodes that held it, the
    earliest seal due of a key there not done for the channel (None: nothing), and the lowest
    live node's seal watermark then."""

    start_ms: int
    window_ms: int
    holders: frozenset[uuid.UUID]
    pending_due_ms: int | None
    sealed_through_ms: int

    def finished(self, until_ms: int | None) -> bool:
        """Nothing left here for the channel (of what is due by ``until_ms``, if given), and
        every live node had published all of it."""
        if until_ms is None:
            return self.pending_due_ms is None and self.sealed_through_ms >= (
                self.start_ms + self.window_ms
            )
        pending_ok = self.pending_due_ms is None or self.pending_due_ms > until_ms
        return pending_ok and self.sealed_through_ms >= min(
            until_ms, self.start_ms + self.window_ms
        )


@dataclass(slots=True)
class ChannelProgress:
    """What the runner shows for a channel (a snapshot).

    ``pending_*``: the copies planned for the channel and not granted yet (the broker's queue),
    of the starts its cursor looked at last round (at most ``max_starts_per_round``); ``ready``
    and ``handed``
    copies (``in_flight_rows``, ``oldest_in_flight_ms``) are granted and not committed yet; the
    backlog is both. ``lag_ms``: at the channel's last commit, how long after the end of the
    oldest slice it carried (None before the first)."""

    pending_copies: int = 0
    pending_rows: int = 0
    waiting_keys: int = 0
    oldest_pending_ms: int | None = None
    ready: int = 0
    handed: int = 0
    in_flight_rows: int = 0
    oldest_in_flight_ms: int | None = None
    committed_batches: int = 0
    sends: int = 0
    unique: int = 0
    unique_saturated: bool = False
    last_commit_ms: int | None = None
    lag_ms: int | None = None

    @property
    def backlog_copies(self) -> int:
        return self.pending_copies + self.ready + self.handed

    @property
    def backlog_rows(self) -> int:
        return self.pending_rows + self.in_flight_rows

    @property
    def oldest_backlog_ms(self) -> int | None:
        starts = [s for s in (self.oldest_pending_ms, self.oldest_in_flight_ms) if s is not None]
        return min(starts) if starts else None


@dataclass(slots=True)
class _TableRound:
    """What one round read for one table."""

    keyspace: str
    table: str
    channels: tuple[Channel, ...]
    settings: SliceSettings
    held: dict[int, frozenset[uuid.UUID]]
    picked: dict[str, tuple[int, ...]]
    sealed: list[SealedSlice] = field(default_factory=list)
    watermarks: list[SealWatermark] = field(default_factory=list)
    sent: list[SentRecord] = field(default_factory=list)
    replicas_of: ReplicasOf | None = None
    unreachable: tuple[uuid.UUID, ...] = ()


class ReplicaCoordinator:
    """Plans, grants and books the transmission of one job (module docstring)."""

    def __init__(
        self,
        view: ClusterView,
        channels: Sequence[Channel],
        *,
        permits: int = DEFAULT_PERMITS,
        once_until_ms: int | None = None,
        max_starts_per_round: int = DEFAULT_MAX_STARTS_PER_ROUND,
        max_copies_per_batch: int = DEFAULT_MAX_COPIES_PER_BATCH,
        round_interval_s: float = DEFAULT_ROUND_INTERVAL_S,
        clock: Clock = wall_ms,
    ) -> None:
        if not channels:
            raise CoordinatorError("a coordinator needs at least one channel")
        self.view = view
        self.channels = {channel.name: channel for channel in channels}
        self.once_until_ms = once_until_ms
        self.max_starts_per_round = max_starts_per_round
        self.max_copies_per_batch = max_copies_per_batch
        self.round_interval_s = round_interval_s
        self.clock = clock
        broker = PermitBroker(permits)
        for channel in channels:
            broker.configure(channel)
        self.ledger = Ledger(broker, self.channels)
        self.token = new_token()
        self._lock = threading.Condition()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._live: frozenset[uuid.UUID] = frozenset()
        self._marks: dict[tuple[str, str], int] = {}  # (ks, table) -> lowest live watermark
        self._starts: dict[str, dict[int, _StartState]] = {name: {} for name in self.channels}
        self._held: dict[tuple[str, str], dict[int, frozenset[uuid.UUID]]] = {}
        self._written: dict[tuple[str, int], list[SentRecord]] = {}  # (channel, start)
        self._sent_read: dict[tuple[str, int], list[SentRecord]] = {}
        self._final_copies: dict[
            tuple[str, str, int], tuple[frozenset[uuid.UUID], list[SealedSlice]]
        ] = {}
        self._progress = {name: ChannelProgress() for name in self.channels}
        self.rounds = 0
        self.last_error: str | None = None
        self._server = RpcServer(self.handle, self.token)
        self._thread = threading.Thread(target=self._loop, name="replica-planner", daemon=True)

    @property
    def address(self) -> str:
        return self._server.address

    def start(self) -> ReplicaCoordinator:
        self._server.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._server.stop()
        self._thread.join(60)

    # --- the planning loop --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self.run_round()
                self.last_error = None
            except Exception as error:  # a node or QUORUM away: the next round tries again
                self.last_error = f"{type(error).__name__}: {error}"
                _LOG.warning("replica coordinator round failed: %s", self.last_error)
            self._wake.wait(self.round_interval_s)
            self._wake.clear()
            rest = MIN_ROUND_SPACING_S - (time.monotonic() - began)
            if rest > 0:
                self._stopping.wait(rest)

    def wake(self) -> None:
        self._wake.set()

    def run_round(self) -> None:
        """One round (module docstring): read, plan, offer, grant."""
        self._retry_unrecorded()
        hosts = self.view.hosts()
        live = frozenset(state.host_id for state in hosts if state.up)
        if self.rounds % CHANNEL_REFRESH_ROUNDS == 0:
            self._refresh_channels()
        rounds = [self._read_table(key, channels, live) for key, channels in self._tables()]
        with self._lock:
            for table_round in rounds:
                live = live - set(table_round.unreachable)
            self._live = live
            for table_round in rounds:
                self._plan_table(table_round, live)
            self.ledger.granted(self.ledger.broker.grant())
            self._update_counts()
            self.rounds += 1
            self._lock.notify_all()

    def _tables(self) -> list[tuple[tuple[str, str], tuple[Channel, ...]]]:
        tables: dict[tuple[str, str], list[Channel]] = {}
        for channel in self.channels.values():
            tables.setdefault((channel.source_keyspace, channel.source_table), []).append(channel)
        return [(key, tuple(channels)) for key, channels in sorted(tables.items())]

    def _refresh_channels(self) -> None:
        """Take the stored settings of the channels this job runs (priority, order, switches:
        ``ringflow replication channel update|pause|resume`` while it runs)."""
        stored = {channel.name: channel for channel in self.view.channels()}
        with self._lock:
            for name, current in self.channels.items():
                fresh = stored.get(name)
                if fresh is not None and fresh.slice_settings == current.slice_settings:
                    self.channels[name] = fresh
                    self.ledger.broker.configure(fresh)

    def _read_table(
        self, key: tuple[str, str], channels: tuple[Channel, ...], live: frozenset[uuid.UUID]
    ) -> _TableRound:
        """One table's reads of a round. Copies at a start are read again only until every
        live node's watermark passed it (then they are final, until another node turns up
        holding it); ``sent`` partitions only the first time a channel picks a start (this job
        writes the channel's later records itself)."""
        keyspace, table = key
        held, failed = self.view.held(keyspace, table, live)
        settings = channels[0].slice_settings
        with self._lock:
            self._held[key] = held
            self._prune(key, held)
            picked = {c.name: self._pick(c, held, settings) for c in channels}
        result = _TableRound(keyspace, table, channels, settings, held, picked)
        result.unreachable = failed
        result.replicas_of = self.view.replicas_of(keyspace)
        result.watermarks = self.view.watermarks(keyspace, table)  # before the slices
        lowest = _lowest_watermark(result.watermarks, live - set(failed), keyspace)
        starts = sorted({start for chosen in picked.values() for start in chosen})
        result.sealed = self._sealed(key, starts, held, lowest, settings)
        for channel in channels:
            result.sent += self._sent(key, channel.name, picked[channel.name])
        return result

    def _sealed(
        self,
        key: tuple[str, str],
        starts: Sequence[int],
        held: Mapping[int, frozenset[uuid.UUID]],
        lowest_mark_ms: int,
        settings: SliceSettings,
    ) -> list[SealedSlice]:
        final = self._final_copies
        copies: list[SealedSlice] = []
        wanted = []
        for start in starts:
            known = final.get((*key, start))
            if known is not None and held.get(start, frozenset()) <= known[0]:
                copies.extend(known[1])
            else:
                wanted.append(start)
        fresh = self.view.sealed(*key, wanted)
        copies.extend(fresh)
        for start in wanted:
            if lowest_mark_ms >= start + settings.window_ms:
                at = [copy for copy in fresh if copy.key.slice_start_ms == start]
                final[(*key, start)] = (held.get(start, frozenset()), at)
        return copies

    def _sent(self, key: tuple[str, str], channel: str, starts: Sequence[int]) -> list[SentRecord]:
        unread = [start for start in starts if (channel, start) not in self._sent_read]
        for record in self.view.sent(*key, channel, unread):
            self._sent_read.setdefault((channel, record.key.slice_start_ms), []).append(record)
        for start in unread:
            self._sent_read.setdefault((channel, start), [])
        return [record for start in starts for record in self._sent_read[(channel, start)]]

    def _prune(self, key: tuple[str, str], held: Mapping[int, frozenset[uuid.UUID]]) -> None:
        """Forget what is cached of the table's starts no live node holds any more."""
        for final in [w for w in self._final_copies if w[:2] == key and w[2] not in held]:
            del self._final_copies[final]
        names = {
            c.name for c in self.channels.values() if (c.source_keyspace, c.source_table) == key
        }
        for cache in (self._sent_read, self._written):
            for where in [w for w in cache if w[0] in names and w[1] not in held]:
                del cache[where]

    def _pick(
        self, channel: Channel, held: Mapping[int, frozenset[uuid.UUID]], settings: SliceSettings
    ) -> tuple[int, ...]:
        """The channel's cursor: held starts not finished, its order, at most the bound."""
        states = self._starts[channel.name]
        for start in [s for s in states if s not in held]:
            del states[start]  # no live node holds it any more
        until = self.once_until_ms
        open_starts = []
        for start, holders in held.items():
            if until is not None and start + settings.slice_width_ms > until:
                continue  # nothing of it is due by the end of a once run
            state = states.get(start)
            if state is not None and holders <= state.holders and state.finished(until):
                continue
            open_starts.append(start)
        open_starts.sort(reverse=channel.order is ChannelOrder.LIFO)
        return tuple(open_starts[: self.max_starts_per_round])

    def _plan_table(self, table_round: _TableRound, live: frozenset[uuid.UUID]) -> None:
        """Plan one table's picked starts, offer each channel its sends, judge its starts."""
        assert table_round.replicas_of is not None
        written = [
            record
            for channel in table_round.channels
            for start in table_round.picked[channel.name]
            for record in self._written.get((channel.name, start), ())
        ]
        sent = SentIndex.of([*table_round.sent, *written])
        in_flight = (*self.ledger.broker.in_flight(), *self.ledger.reserved())
        plan = plan_sends(
            table_round.channels,
            table_round.sealed,
            table_round.watermarks,
            sent,
            replicas_of=table_round.replicas_of,
            live=live,
            in_flight=in_flight,
        )
        marks = _lowest_watermark(table_round.watermarks, live, table_round.keyspace)
        self._marks[table_round.keyspace, table_round.table] = marks
        waiting_dues = [(w.key, seal_due_ms(w.key, table_round.settings)) for w in plan.waiting]
        for channel in table_round.channels:
            picked = set(table_round.picked[channel.name])
            sends = [
                send
                for send in plan.for_channel(channel.name)
                if send.key.slice_start_ms in picked and self._in_target(send.key, table_round)
            ]
            self.ledger.broker.configure(self.channels[channel.name])
            self.ledger.broker.offer(channel.name, sends)
            self._judge(channel, table_round, sent, live, marks, waiting_dues)
            self._note_waiting(channel.name, waiting_dues, picked)

    def _in_target(self, key: SliceKey, table_round: _TableRound) -> bool:
        if self.once_until_ms is None:
            return True
        due = due_ms(key.slice_start_ms, key.out_of_sequence, table_round.settings)
        return due <= self.once_until_ms

    def _judge(
        self,
        channel: Channel,
        table_round: _TableRound,
        sent: SentIndex,
        live: frozenset[uuid.UUID],
        lowest_mark_ms: int,
        waiting: Sequence[tuple[SliceKey, int]],
    ) -> None:
        """Remember, per picked start, what is left there for the channel (``_StartState``)."""
        settings = table_round.settings
        pending: dict[int, int] = {}
        for copy in table_round.sealed:
            if copy.node in live and not sent.is_done(channel.name, copy):
                start = copy.key.slice_start_ms
                due = due_ms(start, copy.key.out_of_sequence, settings)
                pending[start] = min(pending.get(start, due), due)
        for key, due in waiting:
            pending[key.slice_start_ms] = min(pending.get(key.slice_start_ms, due), due)
        states = self._starts[channel.name]
        for start in table_round.picked[channel.name]:
            states[start] = _StartState(
                start,
                settings.window_ms,
                table_round.held.get(start, frozenset()),
                pending.get(start),
                lowest_mark_ms,
            )

    def _note_waiting(
        self, channel: str, waiting: Sequence[tuple[SliceKey, int]], picked: set[int]
    ) -> None:
        """Keys of the channel's picked starts waiting for a seal (its pending copies are
        counted after the grants, ``_update_counts``: an offered copy may be granted now)."""
        self._progress[channel].waiting_keys = sum(
            1 for key, _ in waiting if key.slice_start_ms in picked
        )

    def _update_counts(self) -> None:
        for name, book in self.ledger.books.items():
            progress = self._progress[name]
            pending = self.ledger.broker.pending(name)
            progress.pending_copies = len(pending)
            progress.pending_rows = sum(send.row_count for send in pending)
            progress.oldest_pending_ms = min(
                (send.key.slice_start_ms for send in pending), default=None
            )
            progress.ready = len(book.ready)
            progress.handed = book.handed_copies()
            in_flight = [grant.send for grant in book.ready]
            in_flight += [send for batch in book.batches.values() for send in batch.offset.copies]
            progress.in_flight_rows = sum(send.row_count for send in in_flight)
            progress.oldest_in_flight_ms = min(
                (send.key.slice_start_ms for send in in_flight), default=None
            )
            progress.committed_batches = book.committed_batches
            progress.sends = book.sends
            progress.unique = len(book.unique)
            progress.unique_saturated = book.unique.saturated

    # --- commits and sent records -----------------------------------------------------------

    def _record(self, commit: Commit) -> bool:
        """Write a commit's ``sent`` rows (QUORUM); True when written. On failure the copies
        stay reserved and the next round writes them again."""
        try:
            self.view.write_sent(commit.records)
        except Exception as error:  # QUORUM unavailable: retried, never dropped
            _LOG.warning(
                "sent rows of %s batch %s not written: %s", commit.channel, commit.seq, error
            )
            return False
        with self._lock:
            for record in commit.records:
                where = (record.channel, record.key.slice_start_ms)
                self._written.setdefault(where, []).append(record)
            self.ledger.recorded(commit)
        self.wake()
        return True

    def _retry_unrecorded(self) -> None:
        with self._lock:
            pending = self.ledger.unrecorded()
        for commit in pending:
            if not self._record(commit):
                return

    def commit(self, channel: str, offset: ReplicaOffset) -> None:
        with self._lock:
            commit = self.ledger.commit(offset, self.clock())
            self._note_commit(commit)
        if commit is not None:
            self._record(commit)

    def _note_commit(self, commit: Commit | None) -> None:
        """The channel's lag (``ChannelProgress``) as of a commit: its time minus the end of
        the oldest slice it carried."""
        if commit is None or not commit.records:
            return
        width_ms = self.channels[commit.channel].slice_settings.slice_width_ms
        at_ms = max(record.sent_at_ms for record in commit.records)
        oldest_end_ms = min(record.key.slice_start_ms for record in commit.records) + width_ms
        progress = self._progress[commit.channel]
        progress.last_commit_ms = at_ms
        progress.lag_ms = max(0, at_ms - oldest_end_ms)

    # --- serving the sources ------------------------------------------------------------------

    def handle(self, method: str, params: Mapping[str, Any]) -> Any:
        """The RPC entry point (module docstring)."""
        channel = params.get("channel")
        if not isinstance(channel, str) or channel not in self.channels:
            raise CoordinatorError(f"channel {channel!r} is not run by this job")
        if method == "hello":
            return {"channel": channel}
        offset = ReplicaOffset.from_dict(params.get("offset") or {}, channel)
        if method == "latest":
            wait_s = 0.0 if self.once_until_ms is None else MAX_LATEST_WAIT_S
            return self.latest(offset, wait_s).to_dict()
        if method == "resolve":
            return self.resolve(offset)
        if method == "commit":
            self.commit(channel, offset)
            return None
        raise CoordinatorError(f"unknown method {method!r}")

    def latest(self, start: ReplicaOffset, wait_s: float) -> ReplicaOffset:
        """The channel's next offset, or ``start`` when there is nothing (module docstring)."""
        with self._lock:
            commit = self.ledger.latest(start, self.clock())
            self._note_commit(commit)
        if commit is not None:
            self._record(commit)
        deadline = time.monotonic() + wait_s
        with self._lock:
            while True:
                offset = self.ledger.hand_out(start.channel, self.max_copies_per_batch)
                if offset is not None:
                    return offset
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.once_done(start.channel):
                    return start
                self._lock.wait(min(remaining, self.round_interval_s))

    def resolve(self, offset: ReplicaOffset) -> list[str]:
        """The address each copy is read from; the copies' row digests are read there. A node
        that fails that read counts as dead for the rest of the call: its copies go to another
        live holder of the same digest if there is one (else the read fails, and the batch)."""
        with self._lock:
            live = set(self._live)
        while True:
            nodes = [self._read_node(send, live) for send in offset.copies]
            try:
                digests = self._digests(offset, nodes)
                break
            except _NodeFailed as failed:
                if failed.node not in live:
                    raise failed.error from None
                live.discard(failed.node)
        with self._lock:
            self.ledger.resolved(offset, nodes, digests)
        return [self.view.node(node).address for node in nodes]

    def _digests(self, offset: ReplicaOffset, nodes: Sequence[uuid.UUID]) -> list[list[int]]:
        by_node: dict[uuid.UUID, list[int]] = {}
        for index, node in enumerate(nodes):
            by_node.setdefault(node, []).append(index)
        digests: list[list[int]] = [[] for _ in offset.copies]
        for node, indexes in by_node.items():
            try:
                found = self.view.copy_digests(node, [offset.copies[i] for i in indexes])
            except ReplicaReadError as error:
                raise _NodeFailed(node, error) from None
            for index, row_digests in zip(indexes, found, strict=True):
                digests[index] = row_digests
        return digests

    def _read_node(self, send: PlannedSend, live: Collection[uuid.UUID]) -> uuid.UUID:
        if send.node in live:
            return send.node
        key = send.key
        copies = self.view.sealed(key.keyspace, key.table, [key.slice_start_ms])
        for copy in sorted(copies, key=lambda c: c.node):
            if copy.key == key and copy.digest == send.digest and copy.node in live:
                return copy.node
        return send.node  # nobody else has these rows: the read fails, and the batch

    # --- the runner's side --------------------------------------------------------------------

    def query_started(self, channel: str) -> None:
        with self._lock:
            self.ledger.broker.set_reachable(channel, True)
        self.wake()

    def query_failed(self, channel: str) -> None:
        """Its permits go to the others; its handed copies stay reserved (the replay)."""
        with self._lock:
            self.ledger.failed(channel)
            self.ledger.broker.set_reachable(channel, False)
        self.wake()

    def progress(self, channel: str) -> ChannelProgress:
        with self._lock:
            return dataclasses.replace(self._progress[channel])

    def done_through(self, channel: str, until_ms: int) -> bool:
        """Every copy of a slice due by ``until_ms`` that a live node holds is done for the
        channel, every live node's watermark has passed ``until_ms`` and nothing is in flight."""
        with self._lock:
            return self._done_through(channel, until_ms)

    def once_done(self, channel: str) -> bool:
        return self.once_until_ms is not None and self._done_through(channel, self.once_until_ms)

    def _done_through(self, channel: str, until_ms: int) -> bool:
        if not self.ledger.book(channel).idle or self.rounds == 0:
            return False
        config = self.channels[channel]
        table = (config.source_keyspace, config.source_table)
        if self._marks.get(table, -1) < until_ms:
            return False
        width_ms = config.slice_settings.slice_width_ms
        states = self._starts[channel]
        for start, holders in self._held.get(table, {}).items():
            if start + width_ms > until_ms:
                continue
            state = states.get(start)
            if state is None or not holders <= state.holders or not state.finished(until_ms):
                return False
        return True


class _NodeFailed(Exception):
    """A node failed a read of :meth:`ReplicaCoordinator.resolve` (carries the error)."""

    def __init__(self, node: uuid.UUID, error: ReplicaReadError) -> None:
        super().__init__(str(error))
        self.node = node
        self.error = error


def _lowest_watermark(
    watermarks: Iterable[SealWatermark], live: frozenset[uuid.UUID], keyspace: str
) -> int:
    """The lowest seal watermark among the live nodes (-1 when one has none yet)."""
    marks = {mark.node: mark.sealed_through_ms for mark in watermarks if mark.keyspace == keyspace}
    return min((marks.get(node, -1) for node in live), default=-1)
