"""The coordinator's bookkeeping: each channel's copies from grant to ``sent`` record. Pure.

The job's coordinator (:mod:`._replica_coordinator`) owns one :class:`Ledger` and the permit
broker inside it. A copy of a channel goes through:

1. **ready**: the broker granted it (a permit is held); the channel's source has not asked yet.
2. **handed**: the source's ``latestOffset`` took every ready copy of the channel into a batch
   with a new ``seq`` (:class:`ReplicaOffset`); its permits stay held while the batch runs.
3. **committed**: the sink committed the batch. Its permits are released and its ``sent``
   records are due (:class:`Commit`); until they are written the copies stay reserved.
4. **recorded**: the ``sent`` rows are written; the ledger forgets the batch.

Rules (why: Spark's micro-batch loop, checked in the tests):

- **Reservation.** Every copy of a handed or committed-unrecorded batch is *reserved* for its
  channel: the planner is told it is in flight (:meth:`Ledger.reserved`), so it never plans the
  same digest of that key for the channel again while a batch holds it.
- **Failure.** A failed query releases its permits (ready grants are given up, handed batches
  keep their copies but hold no permit), so the other channels go on; the copies stay reserved,
  because the restarted query replays its last logged batch with exactly those copies. The
  replay transmits without permits: permits bound what is *granted*, not what is replayed.
- **Next commit.** Spark asks for a new batch (``latestOffset(start)``) only after the batch that
  ended at ``start`` committed, and it always runs a batch it logged before it asks again. So
  at :meth:`Ledger.latest` the batch ``start`` is committed, and every other batch handed to the
  channel either committed before or was never logged (the query failed in between): all are
  resolved there, the abandoned ones released to be planned again.
- **Idempotent commits.** The runner also reports commits from the queries' progress and the
  sources from ``commit(end)`` (the last batch of a stopped query has no later
  ``latestOffset``); a batch at or below the channel's committed ``seq`` is not committed again.
- **Counting.** A committed batch that this job read (:meth:`Ledger.resolved`) adds its row
  counts to the channel's sends (the rows handed to the sink) and its rows' digests to the
  channel's :class:`UniqueChanges`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from ringflow.errors import invariant
from ringflow.pipeline._replica_offsets import CoordinatorError, ReplicaOffset
from ringflow.replication import Grant, PermitBroker, PlannedSend, SentRecord

DEFAULT_MAX_DIGESTS: Final = 4_000_000
"""Digests one channel's unique count keeps (8 bytes each: 32 MB); past it the count is a lower
bound (:attr:`UniqueChanges.saturated`)."""
_MERGE_AT: Final = 65_536


class UniqueChanges:
    """Distinct 64-bit row digests, in sorted int64 arrays (8 bytes a digest, bounded).

    A row digest is the BLAKE2b-64 of the log row's canonical bytes, which hold its stream id,
    ``cdc$time`` and ``cdc$batch_seq_no``: the same change has the same digest on every replica
    and two changes differ in their bytes, so distinct digests count distinct (stream, time,
    batch_seq_no) unless two of n changes collide in 64 bits (probability about n^2 / 2^65:
    1e-7 for a million changes)."""

    def __init__(self, max_digests: int = DEFAULT_MAX_DIGESTS) -> None:
        if type(max_digests) is not int or max_digests < 1:
            raise CoordinatorError(f"max_digests must be an int >= 1, got {max_digests!r}")
        self.max_digests = max_digests
        self._merged: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._pending: set[int] = set()
        self.saturated = False

    def add(self, digests: Iterable[int]) -> None:
        """Count ``digests``; past ``max_digests`` (checked a merge at a time, so at most
        ``_MERGE_AT`` more are held) nothing more is counted and ``saturated`` says so."""
        if self.saturated:
            return
        pending = self._pending
        for digest in digests:
            pending.add(digest)
            if len(pending) >= _MERGE_AT:
                self._merge()
                if self.saturated:
                    return
        if len(self._merged) + len(pending) >= self.max_digests:
            self._merge()

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, int):
            return False
        if digest in self._pending:
            return True
        index = int(np.searchsorted(self._merged, np.int64(digest)))
        return index < len(self._merged) and int(self._merged[index]) == digest

    def __len__(self) -> int:
        self._merge()
        return len(self._merged)

    def _merge(self) -> None:
        if self._pending:
            fresh = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
            self._merged = np.union1d(self._merged, fresh)
            self._pending.clear()
            self.saturated = len(self._merged) >= self.max_digests


@dataclass(slots=True)
class _Batch:
    offset: ReplicaOffset
    grants: list[Grant]
    read_nodes: tuple[uuid.UUID, ...] | None = None
    digests: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """A committed batch whose ``sent`` records are to be written (then :meth:`Ledger.recorded`)."""

    channel: str
    seq: int
    records: tuple[SentRecord, ...]


@dataclass(slots=True)
class ChannelBook:
    """One channel's copies and counts (module docstring)."""

    name: str
    ready: list[Grant] = field(default_factory=list)
    batches: dict[int, _Batch] = field(default_factory=dict)
    unrecorded: dict[int, Commit] = field(default_factory=dict)
    next_seq: int = 1
    committed_seq: int = 0
    committed_batches: int = 0
    sends: int = 0
    unique: UniqueChanges = field(default_factory=UniqueChanges)

    @property
    def idle(self) -> bool:
        """Nothing granted, handed or waiting to be recorded."""
        return not self.ready and not self.batches and not self.unrecorded

    def handed_copies(self) -> int:
        return sum(len(batch.offset.copies) for batch in self.batches.values())


class Ledger:
    """Every channel's book, and the permit broker whose grants they hold."""

    def __init__(self, broker: PermitBroker, channels: Iterable[str]) -> None:
        self.broker = broker
        self.books = {name: ChannelBook(name) for name in channels}

    def book(self, channel: str) -> ChannelBook:
        try:
            return self.books[channel]
        except KeyError:
            raise CoordinatorError(f"channel {channel!r} is not run by this job") from None

    # --- grants and batches ---------------------------------------------------------------

    def granted(self, grants: Iterable[Grant]) -> None:
        """New grants of the broker: each waits in its channel's ``ready``."""
        for grant in grants:
            self.book(grant.channel).ready.append(grant)

    def hand_out(self, channel: str, max_copies: int) -> ReplicaOffset | None:
        """The channel's ready copies (at most ``max_copies``, in grant order) as its next batch;
        None when nothing is ready."""
        book = self.book(channel)
        if not book.ready:
            return None
        taken, book.ready = book.ready[:max_copies], book.ready[max_copies:]
        offset = ReplicaOffset(channel, book.next_seq, tuple(grant.send for grant in taken))
        book.next_seq += 1
        book.batches[offset.seq] = _Batch(offset, taken)
        return offset

    def resolved(
        self,
        offset: ReplicaOffset,
        read_nodes: Sequence[uuid.UUID],
        digests: Sequence[Sequence[int]],
    ) -> None:
        """The batch is being read: from these nodes, with these row digests per copy. A batch
        this job did not hand out (a replay after the job restarted) becomes reserved here."""
        book = self.book(offset.channel)
        if len(read_nodes) != len(offset.copies) or len(digests) != len(offset.copies):
            raise CoordinatorError(f"batch {offset.seq} of {offset.channel}: copies and reads")
        if offset.seq <= book.committed_seq and offset.seq not in book.batches:
            return  # committed already: a late duplicate of the planning call
        batch = book.batches.get(offset.seq)
        if batch is None or batch.offset != offset:
            if batch is not None:
                self._release(batch)
            batch = book.batches[offset.seq] = _Batch(offset, [])
        batch.read_nodes = tuple(read_nodes)
        batch.digests = tuple(tuple(row_digests) for row_digests in digests)
        book.next_seq = max(book.next_seq, offset.seq + 1)

    # --- commits ----------------------------------------------------------------------------

    def latest(self, start: ReplicaOffset, now_ms: int) -> Commit | None:
        """The source asks for the batch after ``start`` (module docstring, "Next commit"):
        ``start`` is committed (its Commit returned, if it was not already), and every other
        batch of the channel is resolved: abandoned ones are forgotten, to be planned again."""
        book = self.book(start.channel)
        commit = self.commit(start, now_ms)
        for seq, batch in list(book.batches.items()):
            self._release(batch)
            del book.batches[seq]
        book.next_seq = max(book.next_seq, start.seq + 1)
        return commit

    def commit(self, offset: ReplicaOffset, now_ms: int) -> Commit | None:
        """The sink committed ``offset``'s batch: its permits are released, the copies stay
        reserved until :meth:`recorded`; None if it was committed before (or is the initial)."""
        book = self.book(offset.channel)
        if offset.seq == 0 or offset.seq <= book.committed_seq:
            return None
        batch = book.batches.pop(offset.seq, None)
        if batch is not None and batch.offset != offset:
            raise CoordinatorError(
                f"channel {offset.channel}: batch {offset.seq} committed with other copies than "
                "it was handed out with (two jobs on one checkpoint?)"
            )
        nodes = batch.read_nodes if batch is not None and batch.read_nodes else None
        records = tuple(
            send.sent(now_ms)
            if nodes is None or nodes[index] == send.node
            else SentRecord(send.channel, send.key, nodes[index], send.digest, now_ms)
            for index, send in enumerate(offset.copies)
        )
        for seq in [s for s in book.batches if s < offset.seq]:
            self._release(book.batches.pop(seq))  # abandoned: never logged by Spark
        if batch is not None:
            self._release(batch)
            if batch.digests is not None:
                book.sends += offset.rows
                for row_digests in batch.digests:
                    book.unique.add(row_digests)
        book.committed_seq = offset.seq
        book.committed_batches += 1
        book.next_seq = max(book.next_seq, offset.seq + 1)
        commit = Commit(offset.channel, offset.seq, records)
        if records:
            book.unrecorded[offset.seq] = commit
        return commit if records else None

    def recorded(self, commit: Commit) -> None:
        """The commit's ``sent`` rows are written: its copies are no longer reserved."""
        self.book(commit.channel).unrecorded.pop(commit.seq, None)

    def unrecorded(self) -> tuple[Commit, ...]:
        """Commits whose ``sent`` rows failed to be written (to retry), oldest first."""
        return tuple(
            commit for book in self.books.values() for _, commit in sorted(book.unrecorded.items())
        )

    # --- failures and the planner's view ---------------------------------------------------

    def failed(self, channel: str) -> None:
        """The channel's query failed: its permits are released (module docstring, "Failure");
        its ready grants are given up, its batches stay reserved."""
        book = self.book(channel)
        for grant in book.ready:
            self.broker.release(grant)
        book.ready = []
        for batch in book.batches.values():
            self._release(batch)

    def reserved(self) -> tuple[PlannedSend, ...]:
        """Copies of handed and committed-unrecorded batches, every channel: in flight for the
        planner (the broker's outstanding grants are the rest of it)."""
        copies: list[PlannedSend] = []
        for book in self.books.values():
            for batch in book.batches.values():
                copies.extend(batch.offset.copies)
            for commit in book.unrecorded.values():
                copies.extend(
                    PlannedSend(r.channel, r.key, r.node, r.digest, 0) for r in commit.records
                )
        return tuple(copies)

    def _release(self, batch: _Batch) -> None:
        for grant in batch.grants:
            self.broker.release(grant)
        batch.grants = []

    def validate(self) -> None:
        """Every grant a book holds is outstanding in the broker, and no other."""
        held = [g for book in self.books.values() for g in book.ready]
        held += [g for book in self.books.values() for b in book.batches.values() for g in b.grants]
        invariant(len(held) == len(set(held)), "a grant is held twice")
        invariant(
            set(held) == set(self.broker.outstanding()),
            f"grants held {sorted(g.grant_id for g in held)} != the broker's outstanding "
            f"{sorted(g.grant_id for g in self.broker.outstanding())}",
        )
        self.broker.validate()
