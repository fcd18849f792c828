"""The coordinator's bookkeeping of replica-side transmission (``pipeline._replica_ledger``) and
the offsets of ``ringflow-replica`` (``pipeline._replica_offsets``).

What it proves: an offset survives its JSON form and refuses foreign ones; grants go to a batch
and hold their permits until the sink commits it; a failed query gives its permits to the other
channels while its batch stays reserved for the replay; Spark's "next batch" call resolves every
batch of the channel (committed or abandoned); commits are idempotent and count sends and
distinct row digests only for batches this job read; the unique count is exact and bounded. A
stateful test drives random grants, hand-outs, failures, replays and commits and checks after
every step that the ledger's grants are exactly the broker's outstanding ones and no copy is
both reserved and offered again.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringflow.pipeline._replica_ledger import Ledger, UniqueChanges
from ringflow.pipeline._replica_offsets import (
    CoordinatorError,
    ReplicaOffset,
    ReplicaOffsetError,
    copies_by_node,
)
from ringflow.replication import Channel, PermitBroker, PlannedSend, SliceKey

A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))


def send(channel: str, start_s: int, node: uuid.UUID = A, rows: int = 3) -> PlannedSend:
    key = SliceKey("ks", "t", -100, 100, start_s * 1000, start_s % 2 == 1)
    return PlannedSend(channel, key, node, bytes([start_s % 256]) * 16, rows)


def ledger(permits: int = 4, channels: tuple[str, ...] = ("hub", "lake")) -> Ledger:
    broker = PermitBroker(permits)
    for name in channels:
        broker.configure(Channel(name, "ks", "t", "parquet:/l"))
    return Ledger(broker, channels)


def grant_all(book: Ledger, sends: list[PlannedSend]) -> None:
    for channel in {s.channel for s in sends}:
        book.broker.offer(channel, [s for s in sends if s.channel == channel])
    book.granted(book.broker.grant())


# --- offsets -----------------------------------------------------------------------------------


def test_an_offset_survives_its_json_form_and_names_its_copies_exactly() -> None:
    offset = ReplicaOffset("hub", 7, (send("hub", 1), send("hub", 2, B, rows=0)))
    assert ReplicaOffset.from_dict(offset.to_dict(), "hub") == offset
    assert offset.rows == 3
    assert ReplicaOffset.from_dict(ReplicaOffset.initial("hub").to_dict()).copies == ()


@pytest.mark.parametrize(
    "data",
    [
        {"seq": 1},
        {"channel": "lake", "seq": 1, "copies": []},  # another channel's checkpoint
        {"channel": "hub", "seq": -1, "copies": []},
        {"channel": "hub", "seq": 1, "copies": [["not", "a", "copy"]]},
        {"channel": "hub", "seq": 1, "copies": [[str(A), "ks", "t", 0, 1, 0, False, "00", 1]]},
        {
            "channel": "hub",
            "seq": 0,
            "copies": [ReplicaOffset("hub", 1, (send("hub", 1),)).to_dict()["copies"][0]],
        },
        {"watermark_ms": 5, "generation": 1},  # a ringflow-cdc offset
    ],
)
def test_a_foreign_or_broken_offset_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(ReplicaOffsetError):
        ReplicaOffset.from_dict(data, "hub")


def test_copies_are_grouped_by_the_node_they_are_read_from_in_offset_order() -> None:
    copies = [send("hub", 1), send("hub", 2, B), send("hub", 3)]
    groups = copies_by_node(copies, ["10.0.0.1", "10.0.0.2", "10.0.0.1"])
    assert groups == {"10.0.0.1": [copies[0], copies[2]], "10.0.0.2": [copies[1]]}
    with pytest.raises(CoordinatorError):
        copies_by_node(copies, ["10.0.0.1"])


# --- the ledger --------------------------------------------------------------------------------


def test_a_batch_holds_its_permits_until_its_sink_commits_then_its_sent_records_are_due() -> None:
    book = ledger(permits=2)
    grant_all(book, [send("hub", s) for s in (1, 2, 3)])
    offset = book.hand_out("hub", 10)
    assert offset is not None and [c.key.slice_start_ms for c in offset.copies] == [1000, 2000]
    assert book.broker.free_permits == 0
    book.resolved(offset, [A, B], [[1, 2, 3], [3, 4, 5]])  # the second copy read from B
    commit = book.latest(offset, now_ms=99)  # Spark asks for the next batch: this one committed
    assert commit is not None and book.broker.free_permits == 2
    assert [(r.node, r.sent_at_ms) for r in commit.records] == [(A, 99), (B, 99)]
    assert set(book.reserved()) == {  # until the sent rows are written
        PlannedSend("hub", r.key, r.node, r.digest, 0) for r in commit.records
    }
    hub = book.book("hub")
    assert (hub.sends, len(hub.unique)) == (6, 5)
    book.recorded(commit)
    assert book.reserved() == () and hub.idle
    assert book.commit(offset, 100) is None  # idempotent: the progress reports it again
    assert hub.sends == 6
    book.validate()


def test_a_failed_query_frees_its_permits_but_its_batch_stays_reserved_for_the_replay() -> None:
    book = ledger(permits=2)
    grant_all(book, [send("hub", 1), send("hub", 2)])
    offset = book.hand_out("hub", 10)
    assert offset is not None
    book.failed("hub")
    assert book.broker.free_permits == 2  # the lake channel may go on
    assert set(book.reserved()) == set(offset.copies)  # not planned again meanwhile
    book.resolved(offset, [A, A], [[1], [2]])  # the restarted query replays the same offset
    commit = book.latest(offset, 5)
    assert commit is not None and len(commit.records) == 2
    book.recorded(commit)
    assert book.reserved() == ()
    book.validate()


def test_asking_for_the_next_batch_releases_a_batch_spark_never_logged() -> None:
    book = ledger(permits=3)
    grant_all(book, [send("hub", s) for s in (1, 2, 3)])
    first = book.hand_out("hub", 1)
    assert first is not None
    commit = book.latest(first, 1)
    assert commit is not None
    book.recorded(commit)
    lost = book.hand_out("hub", 10)  # handed out, then the query failed before logging it
    assert lost is not None and lost.seq == first.seq + 1
    book.failed("hub")
    assert book.latest(first, 2) is None  # the restarted query asks again after ``first``
    assert book.reserved() == ()  # the lost batch's copies may be planned again
    grant_all(book, list(lost.copies))
    again = book.hand_out("hub", 10)
    assert again is not None and again.seq > lost.seq and again.copies == lost.copies
    book.validate()


def test_a_replay_after_the_job_restarted_is_reserved_and_counted_when_it_commits() -> None:
    book = ledger()
    offset = ReplicaOffset("lake", 41, (send("lake", 4), send("lake", 5)))
    book.resolved(offset, [A, A], [[7, 8, 9], [9, 10, 11]])  # a replay: not handed by this job
    assert set(book.reserved()) == set(offset.copies)
    commit = book.latest(offset, 3)
    assert commit is not None
    lake = book.book("lake")
    assert (lake.sends, len(lake.unique), lake.next_seq) == (6, 5, 42)
    unread = ReplicaOffset("lake", 42, (send("lake", 6),))  # committed by the previous job
    assert book.latest(unread, 4) is not None  # its sent rows are written, not counted
    assert lake.sends == 6


def test_a_commit_of_other_copies_than_handed_out_is_refused() -> None:
    book = ledger()
    grant_all(book, [send("hub", 1)])
    offset = book.hand_out("hub", 10)
    assert offset is not None
    with pytest.raises(CoordinatorError):
        book.commit(ReplicaOffset("hub", offset.seq, (send("hub", 9),)), 1)


def test_unique_changes_are_exact_and_bounded() -> None:
    unique = UniqueChanges(max_digests=5)
    unique.add([3, -7, 3, 2**63 - 1, -(2**63)])
    assert len(unique) == 4 and -7 in unique and 5 not in unique and not unique.saturated
    unique.add([3, 11, 12])
    assert len(unique) == 6 and unique.saturated  # a lower bound from here on
    unique.add([13])
    assert len(unique) == 6 and 13 not in unique
    big = UniqueChanges()
    big.add(range(200_000))
    big.add(range(100_000, 300_000))
    assert len(big) == 300_000 and 299_999 in big


class LedgerMachine(RuleBasedStateMachine):
    """Random grants, hand-outs, failures, replays and commits on two channels, 3 permits."""

    def __init__(self) -> None:
        super().__init__()
        self.book = ledger(permits=3)
        self.logged: dict[str, ReplicaOffset] = {}  # Spark's last logged, uncommitted batch
        self.committed: dict[str, ReplicaOffset] = {
            name: ReplicaOffset.initial(name) for name in ("hub", "lake")
        }
        self.next_start = 1

    @rule(channel=st.sampled_from(["hub", "lake"]), count=st.integers(1, 4))
    def plan(self, channel: str, count: int) -> None:
        reserved = {(s.channel, s.key, s.digest) for s in self.book.reserved()}
        sends = []
        for _ in range(count):
            candidate = send(channel, self.next_start, A)
            self.next_start += 1
            assert (candidate.channel, candidate.key, candidate.digest) not in reserved
            sends.append(candidate)
        self.book.broker.offer(channel, sends)
        self.book.granted(self.book.broker.grant())

    @rule(channel=st.sampled_from(["hub", "lake"]))
    def batch(self, channel: str) -> None:
        if channel in self.logged:
            return  # Spark runs its logged batch before it asks again
        commit = self.book.latest(self.committed[channel], 1)
        if commit is not None:
            self.book.recorded(commit)
        offset = self.book.hand_out(channel, 2)
        if offset is not None:
            self.logged[channel] = offset

    @rule(channel=st.sampled_from(["hub", "lake"]))
    def fail(self, channel: str) -> None:
        self.book.failed(channel)

    @rule(channel=st.sampled_from(["hub", "lake"]), record=st.booleans())
    def run_batch(self, channel: str, record: bool) -> None:
        offset = self.logged.pop(channel, None)
        if offset is None:
            return
        self.book.resolved(offset, [c.node for c in offset.copies], [[1]] * len(offset.copies))
        commit = self.book.commit(offset, 2)  # reported by the progress
        self.committed[channel] = offset
        if commit is not None and record:
            self.book.recorded(commit)

    @invariant()
    def grants_match_the_broker(self) -> None:
        self.book.validate()
        pending = {
            (s.channel, s.key, s.digest)
            for name in ("hub", "lake")
            for s in self.book.broker.pending(name)
        }
        reserved = {(s.channel, s.key, s.digest) for s in self.book.reserved()}
        assert not pending & reserved


TestLedgerMachine = LedgerMachine.TestCase
