"""Who sends which copy of a sealed slice to each channel, and when a node may drop its data.

Seed 002 "Transmission of mutations", "Time slice CRC processing" and "Handling the Node Failure
Case"; REPLICATION.md decisions 5 (who transmits), 4 (sent, synch-delete) and 9 (unranked
holders). The Spark job's driver calls :func:`plan_sends` every round with what it read from the
replicated tables; it is pure and deterministic.

Rules, per slice key (one (table, range, time bucket); each node holding rows of it publishes a
:class:`SealedSlice`, its **copy**):

1. **Order.** The holders of an in-sequence key are ranked by the range's replicas in strategy
   order (primary first: ``_ranks``). A holder that is not a replica of the range today (it held
   it before a topology change, decision 9) is **unranked**: it ranks after every ranked node,
   unranked nodes among themselves by host id.
2. **Wait.** An in-sequence key is decided only once every *live ranked* node has either
   published its copy or passed the key by its **seal watermark** (:class:`SealWatermark`:
   every slice of the table due to seal at or before ``sealed_through_ms`` is sealed on that
   node; a slice is due at :func:`seal_due_ms`). Until then the key waits
   (:class:`WaitingSlice`): a node that has not sealed yet may hold the copy that should be
   sent, and deciding without it sends a second copy.
3. **Send.** Node n transmits its copy iff n is live and no live node ranked above n holds a
   copy with the same digest. So with all digests equal only the active node sends; with
   mismatches each distinct digest is sent once, by its highest-ranked live holder (the union),
   an unranked holder included. A dead node's copy waits until it is live again.
4. **Out-of-sequence** keys (bucketed by arrival: seed 002 "treated as exceptional data which
   will need to be replicated from all replica nodes"): every live holder sends its own copy,
   with no ranks and no waiting; only copies that are *identical* (same key, same digest: an
   old row that reached every replica in the same arrival bucket) go once, from the live
   holder with the lowest host id. Sending both would deliver the same rows twice, and the
   second would be done by rule 5 while still in flight, so its node could drop its data under
   the transmission.
5. **Done** (per channel, synch-delete): a copy is done for a channel when the channel has a
   ``sent`` record for the key with the same digest (sent by any node) or sent by this node.
   Done copies are never planned again, and neither is a copy whose digest is in flight for
   the channel (granted by the permit broker, not yet recorded): a running transmission is not
   doubled. When it fails the
   next round plans the key again with the nodes live then (so a restarted primary sends what
   its secondary did not finish; seed 002 resends the unfinished slice from the primary
   even while the secondary is still sending it, which this rule does not).
6. **Channels.** Only channels of the key's table with collection enabled are planned (a
   paused-transmission channel is planned too: its backlog is real; the permit broker gives it
   nothing). A node may **drop** a copy's data (:func:`may_drop`) once every
   collection-enabled channel of its table has it done; channels with collection off or
   dropped do not hold data back.

Liveness is the caller's: a node is live when gossip has it up *and* the job can read from it
(a node the job cannot reach is dead to the planner; its copies are sent by others).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ringflow.replication._channels import Channel, table_slice_settings
from ringflow.replication._model import (
    SLICE_DIGEST_SIZE,
    ReplicationArgumentError,
    SealedSlice,
    SliceKey,
    SliceSettings,
)
from ringflow.replication._ranks import ReplicasOf, range_of, rank_ranges

_INT64_MAX = 2**63 - 1


def seal_due_ms(key: SliceKey, settings: SliceSettings) -> int:
    """When a node's clock seals ``key``: its start plus the window (the slice is open while
    ``slice_start_ms + window_ms > now``; REPLICATION.md decision 2)."""
    return key.slice_start_ms + settings.window_ms


def _check_digest(digest: object) -> None:
    if not isinstance(digest, bytes) or len(digest) != SLICE_DIGEST_SIZE:
        raise ReplicationArgumentError(
            f"a slice digest is {SLICE_DIGEST_SIZE} bytes, got {digest!r}"
        )


def _check_node(node: object) -> None:
    if not isinstance(node, uuid.UUID):
        raise ReplicationArgumentError(f"a node is a host id (uuid.UUID), got {node!r}")


@dataclass(frozen=True, slots=True)
class SealWatermark:
    """A node's promise for one table: every slice due to seal at or before
    ``sealed_through_ms`` (by :func:`seal_due_ms`) is sealed and published. A node publishes its
    slices *before* raising its watermark, so "passed and no copy" means "holds no rows"."""

    node: uuid.UUID
    keyspace: str
    table: str
    sealed_through_ms: int

    def __post_init__(self) -> None:
        _check_node(self.node)
        for name, value in (("keyspace", self.keyspace), ("table", self.table)):
            if not isinstance(value, str) or not value:
                raise ReplicationArgumentError(f"{name} must be a non-empty str: {value!r}")
        mark = self.sealed_through_ms
        if not isinstance(mark, int) or isinstance(mark, bool) or not 0 <= mark <= _INT64_MAX:
            raise ReplicationArgumentError(f"sealed_through_ms must be an int64 >= 0: {mark!r}")


@dataclass(frozen=True, slots=True)
class SentRecord:
    """A copy fully delivered to a channel's destination (the job writes it after the sink
    commits): ``system_replication.sent``."""

    channel: str
    key: SliceKey
    node: uuid.UUID
    digest: bytes
    sent_at_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.channel, str) or not self.channel:
            raise ReplicationArgumentError(f"channel must be a non-empty str: {self.channel!r}")
        if not isinstance(self.key, SliceKey):
            raise ReplicationArgumentError(f"key must be a SliceKey, got {self.key!r}")
        _check_node(self.node)
        _check_digest(self.digest)
        value = self.sent_at_ms
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _INT64_MAX:
            raise ReplicationArgumentError(f"sent_at_ms must be an int64 >= 0: {value!r}")


@dataclass(frozen=True, slots=True, order=True)
class PlannedSend:
    """Send ``node``'s copy of ``key`` (``digest``, ``row_count`` rows) to ``channel``."""

    channel: str
    key: SliceKey
    node: uuid.UUID
    digest: bytes
    row_count: int

    @classmethod
    def of(cls, channel: str, copy: SealedSlice) -> PlannedSend:
        return cls(channel, copy.key, copy.node, copy.digest, copy.row_count)

    def sent(self, sent_at_ms: int) -> SentRecord:
        """The record the job writes once the channel's sink committed this copy."""
        return SentRecord(self.channel, self.key, self.node, self.digest, sent_at_ms)


@dataclass(frozen=True, slots=True)
class WaitingSlice:
    """An in-sequence key not decided yet: ``nodes`` (live, ranked) neither published a copy
    nor passed it by watermark."""

    key: SliceKey
    nodes: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class SendPlan:
    """One round's decisions: the copies to send (sorted by channel, key, node) and the keys
    still waiting for a node to seal."""

    sends: tuple[PlannedSend, ...]
    waiting: tuple[WaitingSlice, ...]

    def for_channel(self, channel: str) -> tuple[PlannedSend, ...]:
        return tuple(send for send in self.sends if send.channel == channel)


@dataclass(frozen=True, slots=True)
class SentIndex:
    """The ``sent`` records by key and channel: which digests and which nodes' copies are
    done."""

    records: tuple[SentRecord, ...]
    _by_key: Mapping[SliceKey, Mapping[str, tuple[frozenset[bytes], frozenset[uuid.UUID]]]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        by_key: dict[SliceKey, dict[str, tuple[set[bytes], set[uuid.UUID]]]] = {}
        for record in self.records:
            if not isinstance(record, SentRecord):
                raise ReplicationArgumentError(f"expected SentRecord, got {record!r}")
            channels = by_key.setdefault(record.key, {})
            digests, nodes = channels.setdefault(record.channel, (set(), set()))
            digests.add(record.digest)
            nodes.add(record.node)
        frozen = {
            key: {name: (frozenset(d), frozenset(n)) for name, (d, n) in channels.items()}
            for key, channels in by_key.items()
        }
        object.__setattr__(self, "_by_key", frozen)

    @classmethod
    def of(cls, records: Iterable[SentRecord]) -> SentIndex:
        return cls(tuple(records))

    def is_done(self, channel: str, copy: SealedSlice) -> bool:
        """Rule 5: the channel has the key sent with this digest, or sent by this node."""
        done = self._by_key.get(copy.key, {}).get(channel)
        return done is not None and (copy.digest in done[0] or copy.node in done[1])


def may_drop(copy: SealedSlice, channels: Iterable[Channel], sent: SentIndex) -> bool:
    """Rule 6: every collection-enabled channel of the copy's table has it done (so a node
    with no such channel drops at once: nothing is held for nobody)."""
    return all(
        sent.is_done(channel.name, copy)
        for channel in channels
        if channel.collection_enabled
        and (channel.source_keyspace, channel.source_table) == (copy.key.keyspace, copy.key.table)
    )


def droppable(
    node: uuid.UUID, sealed: Iterable[SealedSlice], channels: Sequence[Channel], sent: SentIndex
) -> tuple[SliceKey, ...]:
    """The keys of ``node``'s copies whose data it may drop now (:func:`may_drop`), sorted."""
    return tuple(
        sorted(copy.key for copy in sealed if copy.node == node and may_drop(copy, channels, sent))
    )


def _copies_by_key(sealed: Iterable[SealedSlice]) -> dict[SliceKey, dict[uuid.UUID, SealedSlice]]:
    copies: defaultdict[SliceKey, dict[uuid.UUID, SealedSlice]] = defaultdict(dict)
    for copy in sealed:
        if not isinstance(copy, SealedSlice):
            raise ReplicationArgumentError(f"expected SealedSlice, got {copy!r}")
        seen = copies[copy.key].setdefault(copy.node, copy)
        if seen.digest != copy.digest or seen.row_count != copy.row_count:
            raise ReplicationArgumentError(
                f"node {copy.node} published two different copies of {copy.key}: "
                f"{seen.digest.hex()} ({seen.row_count} rows) and {copy.digest.hex()} "
                f"({copy.row_count} rows); a sealed slice never changes"
            )
    return copies


def _watermark_index(watermarks: Iterable[SealWatermark]) -> dict[tuple[uuid.UUID, str, str], int]:
    """The highest watermark per (node, keyspace, table): a watermark only moves forward."""
    index: dict[tuple[uuid.UUID, str, str], int] = {}
    for mark in watermarks:
        if not isinstance(mark, SealWatermark):
            raise ReplicationArgumentError(f"expected SealWatermark, got {mark!r}")
        where = (mark.node, mark.keyspace, mark.table)
        index[where] = max(index.get(where, -1), mark.sealed_through_ms)
    return index


def _in_flight_index(in_flight: Iterable[PlannedSend]) -> dict[tuple[str, SliceKey], set[bytes]]:
    index: defaultdict[tuple[str, SliceKey], set[bytes]] = defaultdict(set)
    for send in in_flight:
        if not isinstance(send, PlannedSend):
            raise ReplicationArgumentError(f"expected PlannedSend in flight, got {send!r}")
        index[send.channel, send.key].add(send.digest)
    return index


def holders_in_rank_order(
    replicas: Sequence[uuid.UUID], copies: Mapping[uuid.UUID, SealedSlice]
) -> list[SealedSlice]:
    """Rule 1: the copies of one key, ranked holders in strategy order, then unranked ones
    by host id."""
    ranked = [copies[node] for node in replicas if node in copies]
    unranked = sorted(node for node in copies if node not in replicas)
    return ranked + [copies[node] for node in unranked]


def choose_senders(
    holders_in_order: Sequence[SealedSlice], live: Collection[uuid.UUID]
) -> list[SealedSlice]:
    """Rule 3 (and 4, in host id order): the live holders no live holder ranked above
    matches by digest."""
    chosen: list[SealedSlice] = []
    seen: set[bytes] = set()
    for copy in holders_in_order:
        if copy.node in live and copy.digest not in seen:
            chosen.append(copy)
            seen.add(copy.digest)
    return chosen


def _unresolved(
    key: SliceKey,
    replicas: Sequence[uuid.UUID],
    copies: Mapping[uuid.UUID, SealedSlice],
    live: Collection[uuid.UUID],
    marks: Mapping[tuple[uuid.UUID, str, str], int],
    settings: SliceSettings,
) -> frozenset[uuid.UUID]:
    """Rule 2: the live ranked nodes that neither published a copy nor passed ``key``."""
    due = seal_due_ms(key, settings)
    return frozenset(
        node
        for node in replicas
        if node in live
        and node not in copies
        and marks.get((node, key.keyspace, key.table), -1) < due
    )


def plan_sends(
    channels: Iterable[Channel],
    sealed: Iterable[SealedSlice],
    watermarks: Iterable[SealWatermark],
    sent: Iterable[SentRecord] | SentIndex,
    *,
    replicas_of: ReplicasOf,
    live: Collection[uuid.UUID],
    in_flight: Iterable[PlannedSend] = (),
) -> SendPlan:
    """One round of the rules (module docstring) over everything the job read: the copies to
    send per channel, and the keys waiting for a live ranked node to seal."""
    channels = tuple(channels)
    settings = table_slice_settings(channels)
    collecting: defaultdict[tuple[str, str], list[Channel]] = defaultdict(list)
    for channel in sorted(channels, key=lambda c: c.name):
        if channel.collection_enabled:
            collecting[channel.source_keyspace, channel.source_table].append(channel)
    live = frozenset(live)
    for node in live:
        _check_node(node)
    copies = _copies_by_key(sealed)
    sent_index = sent if isinstance(sent, SentIndex) else SentIndex.of(sent)
    flight = _in_flight_index(in_flight)
    marks = _watermark_index(watermarks)
    ranges = {
        key: range_of(key)
        for key in copies
        if not key.out_of_sequence and (key.keyspace, key.table) in collecting
    }
    ranks = rank_ranges(ranges.values(), replicas_of)
    sends: list[PlannedSend] = []
    waiting: list[WaitingSlice] = []
    for key, holders in copies.items():
        table = (key.keyspace, key.table)
        if table not in collecting:
            continue
        replicas = ranks.replicas(ranges[key]) if key in ranges else ()
        chosen = _choose(key, holders, replicas, live, marks, settings[table], waiting)
        for channel in collecting[table]:
            sends.extend(_unsent(channel.name, chosen, sent_index, flight))
    sends.sort()
    waiting.sort(key=lambda slice_waiting: slice_waiting.key)
    return SendPlan(tuple(sends), tuple(waiting))


def _choose(
    key: SliceKey,
    copies: Mapping[uuid.UUID, SealedSlice],
    replicas: Sequence[uuid.UUID],
    live: Collection[uuid.UUID],
    marks: Mapping[tuple[uuid.UUID, str, str], int],
    settings: SliceSettings,
    waiting: list[WaitingSlice],
) -> list[SealedSlice]:
    """The copies of ``key`` to send (rules 2-4), or none when it waits (added to ``waiting``)."""
    if key.out_of_sequence:
        return choose_senders([copies[node] for node in sorted(copies)], live)
    unresolved = _unresolved(key, replicas, copies, live, marks, settings)
    if unresolved:
        waiting.append(WaitingSlice(key, unresolved))
        return []
    return choose_senders(holders_in_rank_order(replicas, copies), live)


def _unsent(
    channel: str,
    chosen: Sequence[SealedSlice],
    sent: SentIndex,
    flight: Mapping[tuple[str, SliceKey], set[bytes]],
) -> list[PlannedSend]:
    """Rule 5: the chosen copies not done for ``channel`` and not doubling one in flight."""
    result: list[PlannedSend] = []
    for copy in chosen:
        if copy.digest in flight.get((channel, copy.key), ()) or sent.is_done(channel, copy):
            continue
        result.append(PlannedSend.of(channel, copy))
    return result
