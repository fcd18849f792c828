"""What ``ringflow replication status`` says (REPLICATION.md "What users see"; issue 14 §3).

From one round of what the job's planner reads (the channels, the published copies of sealed
slices, the seal watermarks, the ``sent`` records, the live nodes and the ranks):

- per **channel**, its backlog: the slice keys with a copy still to send or still waiting for a
  node to seal (:func:`plan_sends` decides both, so the status and the job agree), the rows of
  the copies to send and the start of the oldest key (its age is the channel's lag bound);
- per **node**, the ranges it is active for by rank (primary ranges it sends for itself, a
  dead primary's ranges it took over as secondary, ...; seed 002's ``node => [{primary},
  {secondary}, {tertiary}]`` restricted to the active ones), and its published copies:
  **matched** (every replica of the key's range published the same digest), **mismatched** (a
  replica's copy differs or is missing: the union of what the live ones hold is sent) and
  **out-of-sequence** (sent by every holder).

Pure: the caller passes the time.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ringflow.replication._channels import Channel
from ringflow.replication._model import SealedSlice, SliceKey
from ringflow.replication._planner import SealWatermark, SentIndex, SentRecord, plan_sends
from ringflow.replication._ranks import ReplicasOf, range_of, rank_ranges
from ringflow.ring import TokenRange


@dataclass(frozen=True, slots=True)
class ChannelBacklog:
    """A channel's slices still to deliver: ``slices`` keys (``waiting`` of them not decided
    yet), ``rows`` in the copies planned, the oldest key's start (None when there is none)."""

    channel: str
    slices: int
    waiting: int
    rows: int
    oldest_start_ms: int | None

    def oldest_age_s(self, now_ms: int) -> float | None:
        if self.oldest_start_ms is None:
            return None
        return max(0, now_ms - self.oldest_start_ms) / 1000.0


@dataclass(frozen=True, slots=True)
class NodeSlices:
    """A node's active ranges by rank (``active_by_rank[0]``: ranges it is the primary of and
    active for; ``[1]``: ranges it took over as secondary...) and its published copies."""

    node: uuid.UUID
    live: bool
    active_by_rank: tuple[int, ...]
    matched: int
    mismatched: int
    out_of_sequence: int


def channel_backlogs(
    channels: Iterable[Channel],
    sealed: Iterable[SealedSlice],
    watermarks: Iterable[SealWatermark],
    sent: Iterable[SentRecord] | SentIndex,
    *,
    replicas_of: ReplicasOf,
    live: Collection[uuid.UUID],
) -> dict[str, ChannelBacklog]:
    """Every channel's backlog (module docstring). A channel with collection off has none: its
    slices are not kept for it. The waiting keys count for every collecting channel of their
    table."""
    channels = tuple(channels)
    sealed = tuple(sealed)
    plan = plan_sends(channels, sealed, watermarks, sent, replicas_of=replicas_of, live=live)
    keys: defaultdict[str, set[SliceKey]] = defaultdict(set)
    rows: defaultdict[str, int] = defaultdict(int)
    for send in plan.sends:
        keys[send.channel].add(send.key)
        rows[send.channel] += send.row_count
    result: dict[str, ChannelBacklog] = {}
    for channel in channels:
        table = (channel.source_keyspace, channel.source_table)
        waiting = (
            {w.key for w in plan.waiting if (w.key.keyspace, w.key.table) == table}
            if channel.collection_enabled
            else set()
        )
        pending = keys[channel.name] | waiting
        oldest = min((key.slice_start_ms for key in pending), default=None)
        undecided = len(waiting - keys[channel.name])
        result[channel.name] = ChannelBacklog(
            channel.name, len(pending), undecided, rows[channel.name], oldest
        )
    return result


def node_slices(
    sealed: Iterable[SealedSlice],
    *,
    ranges: Iterable[TokenRange] = (),
    replicas_of: ReplicasOf,
    live: Collection[uuid.UUID],
    nodes: Sequence[uuid.UUID] = (),
) -> dict[uuid.UUID, NodeSlices]:
    """Per node (``nodes``, and every holder or replica met): the active ranges by rank over the
    in-sequence ranges of the copies and ``ranges`` (e.g. the ring's vnode ranges, so an idle
    table still shows who is active) and its copies matched / mismatched /
    out-of-sequence."""
    by_key: defaultdict[SliceKey, dict[uuid.UUID, bytes]] = defaultdict(dict)
    for copy in sealed:
        by_key[copy.key][copy.node] = copy.digest
    in_sequence = {range_of(key) for key in by_key if not key.out_of_sequence}
    ranks = rank_ranges({*ranges, *in_sequence}, replicas_of)
    everyone = {*nodes, *ranks.nodes(), *(n for held in by_key.values() for n in held)}
    depth = max((len(ranks.replicas(r)) for r in ranks.ranges()), default=0)
    active: dict[uuid.UUID, list[int]] = {node: [0] * depth for node in everyone}
    for token_range in ranks.ranges():
        node = ranks.active_node(token_range, live)
        if node is not None:
            rank = ranks.rank_of(token_range, node)
            assert rank is not None  # the active node is one of the range's replicas
            active[node][rank] += 1
    counts: dict[uuid.UUID, list[int]] = {node: [0, 0, 0] for node in everyone}
    for key, holders in by_key.items():
        replicas = () if key.out_of_sequence else ranks.replicas(range_of(key))
        same = len(set(holders.values())) == 1 and set(replicas) <= set(holders)
        for node in holders:
            counts[node][2 if key.out_of_sequence else (0 if same else 1)] += 1
    return {
        node: NodeSlices(node, node in live, tuple(active[node]), *counts[node])
        for node in sorted(everyone)
    }
