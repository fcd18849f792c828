"""A node's publication batches and synch-delete reads (issue 14 §1-2): sealed slices grouped
by their ``slices`` partition and cut to a bound, every slice exactly once; the ``sent``
partitions to read are one per collecting channel and slice start (none for a table without
a collecting channel); a copy is dropped only when every one of its partitions was read and
the planner's ``droppable`` allows it (synch-delete by digest, a paused channel holding
nothing, a table without channels holding nothing)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    Channel,
    ReplicationArgumentError,
    SealedSlice,
    SentPartition,
    SentRecord,
    SliceKey,
    SliceSettings,
    drop_decisions,
    publication_batches,
    sent_partitions,
)

N1, N2 = uuid.UUID(int=1), uuid.UUID(int=2)
SETTINGS = SliceSettings(2, 2)
HUB = Channel("hub", "ks", "t", "ringflow://hub", slice_settings=SETTINGS)
LAKE = Channel("lake", "ks", "t", "parquet:/lake", slice_settings=SETTINGS)
PAUSED = Channel(
    "paused", "ks", "t", "parquet:/p", collection_enabled=False, slice_settings=SETTINGS
)
OTHER = Channel("other", "ks", "u", "parquet:/u", slice_settings=SETTINGS)


def copy(node: uuid.UUID, start_s: int, d: int, *, table: str = "t", lo: int = 0) -> SealedSlice:
    key = SliceKey("ks", table, lo, lo + 10, start_s * 1000)
    return SealedSlice(key, node, bytes([d]) * 16, 3, start_s * 1000 + 4000)


copies = st.builds(
    copy,
    st.just(N1),
    st.integers(0, 5),
    st.integers(0, 3),
    table=st.sampled_from(["t", "u"]),
    lo=st.integers(0, 8).map(lambda n: n * 100),
)


@given(st.lists(copies, unique_by=lambda c: c.key, max_size=40), st.integers(1, 5))
def test_batches_hold_every_slice_once_one_partition_each(
    sealed: list[SealedSlice], rows_max: int
) -> None:
    batches = publication_batches(sealed, rows_max)
    assert Counter(c for batch in batches for c in batch) == Counter(sealed)
    for batch in batches:
        assert 1 <= len(batch) <= rows_max
        assert len({(c.key.keyspace, c.key.table, c.key.slice_start_ms) for c in batch}) == 1
        assert list(batch) == sorted(batch, key=lambda c: c.key)


def test_batches_refuse_a_bad_bound() -> None:
    with pytest.raises(ReplicationArgumentError, match="rows_max"):
        publication_batches([copy(N1, 0, 0)], 0)


def test_sent_partitions_are_per_collecting_channel_and_slice_start() -> None:
    sealed = [copy(N1, 0, 0), copy(N1, 0, 1, lo=100), copy(N1, 2, 0), copy(N1, 0, 0, table="v")]
    found = sent_partitions(sealed, [HUB, LAKE, PAUSED, OTHER])
    assert found == [
        SentPartition("ks", "t", "hub", 0), SentPartition("ks", "t", "hub", 2000),
        SentPartition("ks", "t", "lake", 0), SentPartition("ks", "t", "lake", 2000),
    ]  # fmt: skip
    assert found[0].key_values == ("ks", "t", "hub", 0)


def sent(channel: str, node: uuid.UUID, held: SealedSlice) -> SentRecord:
    return SentRecord(channel, held.key, node, held.digest, 1)


def test_a_copy_is_dropped_when_every_collecting_channel_has_it() -> None:
    mine, theirs = copy(N1, 0, 0), copy(N2, 0, 0)
    differs = copy(N1, 2, 7)
    channels = [HUB, LAKE, PAUSED]
    read = set(sent_partitions([mine, differs], channels))
    assert drop_decisions(N1, [mine, differs], channels, [], read) == ()
    hub_only = [sent("hub", N2, theirs)]
    assert drop_decisions(N1, [mine], channels, hub_only, read) == ()
    both = [*hub_only, sent("lake", N2, theirs)]  # synch-delete: N2's copy, same digest
    assert drop_decisions(N1, [mine, differs], channels, both, read) == (mine.key,)
    other_digest = copy(N2, 2, 8)  # another node's copy with another digest: not ours
    records = [sent(name, N2, other_digest) for name in ("hub", "lake")]
    assert drop_decisions(N1, [differs], channels, records, read) == ()
    unread = read - {SentPartition("ks", "t", "lake", 0)}
    assert drop_decisions(N1, [mine], channels, both, unread) == ()


def test_nothing_holds_a_table_without_collecting_channels() -> None:
    held = copy(N1, 0, 0, table="v")
    assert sent_partitions([held], [HUB, PAUSED]) == []
    assert drop_decisions(N1, [held], [HUB, PAUSED], [], set()) == (held.key,)
    paused_only = copy(N1, 0, 0)
    assert drop_decisions(N1, [paused_only], [PAUSED], [], set()) == (paused_only.key,)
    assert drop_decisions(N2, [paused_only], [PAUSED], [], set()) == ()  # not N2's copy
