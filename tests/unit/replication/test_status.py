"""What ``ringflow replication status`` reports (issue 14 §3): per channel the backlog the
planner still has to send (slices, rows, the oldest start; waiting keys included, sent keys and
channels without collection not), per node its active ranges by rank (a dead primary's ranges
go to its secondary) and its copies matched / mismatched / out-of-sequence."""

from __future__ import annotations

import dataclasses
import uuid

from ringflow.replication import (
    Channel,
    SealedSlice,
    SealWatermark,
    SentRecord,
    SliceKey,
    SliceSettings,
    channel_backlogs,
    node_slices,
)
from ringflow.ring import TokenRange

N1, N2, N3 = (uuid.UUID(int=i) for i in (1, 2, 3))
SETTINGS = SliceSettings(60, 2)
HUB = Channel("hub", "ks", "t", "ringflow://hub", priority=90, slice_settings=SETTINGS)
LAKE = Channel("lake", "ks", "t", "parquet:/lake", priority=10, slice_settings=SETTINGS)
R1, R2 = TokenRange(0, 100), TokenRange(100, 200)
REPLICAS = {R1: (N1, N2, N3), R2: (N2, N3, N1)}


def key(start_s: int, token_range: TokenRange = R1, *, oos: bool = False) -> SliceKey:
    return SliceKey("ks", "t", token_range.left, token_range.right, start_s * 1000, oos)


def copy(node: uuid.UUID, k: SliceKey, d: int = 0, rows: int = 10) -> SealedSlice:
    return SealedSlice(k, node, bytes([d]) * 16, rows, k.slice_start_ms + 120_000)


def marks(through_s: int) -> list[SealWatermark]:
    return [SealWatermark(n, "ks", "t", through_s * 1000) for n in (N1, N2, N3)]


def test_the_backlog_is_what_the_planner_still_sends_per_channel() -> None:
    sealed = [copy(n, key(0), rows=10) for n in (N1, N2, N3)]
    sealed += [copy(N1, key(60), d=1, rows=4), copy(N2, key(60), d=2, rows=5)]
    sealed += [copy(n, key(60), d=3, rows=7) for n in (N3,)]
    hub_sent = [SentRecord("hub", key(0), N1, bytes(16), 1)]
    backlogs = channel_backlogs(
        (HUB, LAKE),
        sealed,
        marks(10_000),
        hub_sent,
        replicas_of=REPLICAS.__getitem__,
        live=(N1, N2, N3),
    )
    # the lake: key 0 once (10 rows) and key 60's three digests (the union: 4 + 5 + 7)
    assert backlogs["lake"] == dataclasses.replace(backlogs["lake"], slices=2, rows=26)
    assert backlogs["lake"].oldest_start_ms == 0
    assert backlogs["lake"].oldest_age_s(90_000) == 90.0
    # the hub has key 0 (synch-delete: the same digest was sent): only key 60 is left
    assert (backlogs["hub"].slices, backlogs["hub"].rows) == (1, 16)
    assert backlogs["hub"].oldest_start_ms == 60_000


def test_a_key_waiting_for_a_node_to_seal_counts_and_a_channel_without_collection_has_none() -> (
    None
):
    paused = dataclasses.replace(LAKE, collection_enabled=False)
    backlogs = channel_backlogs(
        (HUB, paused),
        [copy(N1, key(0))],  # N2 and N3 have neither published nor passed it
        [SealWatermark(N1, "ks", "t", 10_000_000)],
        (),
        replicas_of=REPLICAS.__getitem__,
        live=(N1, N2, N3),
    )
    assert (backlogs["hub"].slices, backlogs["hub"].waiting, backlogs["hub"].rows) == (1, 1, 0)
    assert backlogs["lake"].slices == 0 and backlogs["lake"].oldest_start_ms is None


def test_nothing_left_is_an_empty_backlog() -> None:
    sealed = [copy(n, key(0)) for n in (N1, N2, N3)]
    done = [SentRecord(c, key(0), N1, bytes(16), 1) for c in ("hub", "lake")]
    backlogs = channel_backlogs(
        (HUB, LAKE), sealed, marks(10_000), done, replicas_of=REPLICAS.__getitem__, live=(N1,)
    )
    assert [(b.slices, b.rows, b.oldest_start_ms) for b in backlogs.values()] == [(0, 0, None)] * 2


def test_active_ranges_by_rank_fail_over_and_copies_are_classified() -> None:
    sealed = [copy(n, key(0)) for n in (N1, N2, N3)]  # matched on every node
    sealed += [copy(N1, key(0, R2), d=1), copy(N2, key(0, R2), d=2)]  # N3 missing: mismatched
    sealed += [copy(N3, key(5, oos=True))]
    everyone = node_slices(sealed, ranges=(), replicas_of=REPLICAS.__getitem__, live=(N1, N2, N3))
    assert everyone[N1].active_by_rank == (1, 0, 0)  # primary of R1
    assert everyone[N2].active_by_rank == (1, 0, 0)  # primary of R2
    assert everyone[N3].active_by_rank == (0, 0, 0)
    assert (everyone[N1].matched, everyone[N1].mismatched, everyone[N1].out_of_sequence) == (
        1,
        1,
        0,
    )
    assert (everyone[N3].matched, everyone[N3].mismatched, everyone[N3].out_of_sequence) == (
        1,
        0,
        1,
    )
    # N2 dies: its primary range R2 goes to its secondary N3; N1 keeps R1
    failed = node_slices(sealed, ranges=(), replicas_of=REPLICAS.__getitem__, live=(N1, N3))
    assert failed[N2].active_by_rank == (0, 0, 0) and not failed[N2].live
    assert failed[N3].active_by_rank == (0, 1, 0)
    # N1 dies too: N3 is active for R1 as its tertiary
    alone = node_slices(sealed, ranges=(), replicas_of=REPLICAS.__getitem__, live=(N3,))
    assert alone[N3].active_by_rank == (0, 1, 1)


def test_an_idle_table_still_shows_who_is_active_from_the_ranges_given() -> None:
    idle = node_slices((), ranges=(R1, R2), replicas_of=REPLICAS.__getitem__, live=(N1, N2, N3))
    assert [idle[n].active_by_rank for n in (N1, N2, N3)] == [(1, 0, 0), (1, 0, 0), (0, 0, 0)]
