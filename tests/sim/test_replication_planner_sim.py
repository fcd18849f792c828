"""Who-sends planning, permits and backoff in a seeded model cluster (issue 14 §2, seed 002).

A plain seeded model (no ``ringflow.sim`` network: the planner is pure and the job reads the
replicated tables, so only the data each side sees matters). 3 or 4 nodes with RF 3
(``SimpleStrategy`` over 4 vnodes each, the real ``ringflow.ring``); rows written at random
times to random tokens are captured by each replica that is up, triaged by that node's skewed
clock (in-sequence slice while ``slice_start + window > now``, else an out-of-sequence bucket of
the arrival time), sealed by the node's clock with the real digests, published with a seal
watermark. Faults: node crashes and restarts (a down replica misses rows, so its digest
differs), one-way partitions (the job cannot see node X, which still captures), a fifth node
joining (it becomes ranked for some ranges; old holders keep their slices and may become
unranked), destinations that go away. The job, each 500 ms round: plan with
:func:`plan_sends`, offer to a :class:`PermitBroker` (2-4 permits) two channels (hub: priority
90, fifo; lake: priority 10, lifo), transmit each granted copy over the next round (failing if
its node went down or out of sight, or its destination is away: :class:`DestinationBackoff`),
then record ``sent``; nodes drop copies :func:`may_drop` allows. After the faults everything
heals and the job drains.

Proves, per seed: every captured change reaches every channel at least once (never zero); no
change reaches a channel more often than the number of replicas that captured it (the "every
replica sends" baseline); no digest of an in-sequence slice is sent twice to a channel; a node
never drops a copy a channel still needs (a transmission always finds its data); everything
drains (nothing waits forever). With every node up and holding every row (no faults, no late
rows, no join), each slice is sent exactly once per channel, by its primary (the active node,
even when another replica's clock seals first): 1.00 sends per change.

Seeds: ``SEEDS`` (200 under faults, the first 100 of them fault-free; about 12 s of CPU) in
CI. A longer run: ``RINGFLOW_REPLICATION_SIM_SEEDS=5000 pytest
tests/sim/test_replication_planner_sim.py`` (every seed fault-free too); one
seed: ``RINGFLOW_REPLICATION_SIM_SEED=17 pytest tests/sim/test_replication_planner_sim.py``.
A failing seed's message says how to replay it. ``test_sends_per_unique_change_figures`` prints
the sends per unique change and how often each fault and each kind of send happened.
"""

from __future__ import annotations

import functools
import os
import random
import struct
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest

from ringflow.replication import (
    BackoffPolicy,
    Channel,
    ChannelOrder,
    DestinationBackoff,
    Grant,
    PermitBroker,
    SealedSlice,
    SealWatermark,
    SentIndex,
    SentRecord,
    SliceKey,
    SliceSettings,
    may_drop,
    plan_sends,
    row_digest,
    slice_digest,
)
from ringflow.ring import (
    Host,
    ReplicationFactor,
    SimpleStrategy,
    TokenMetadata,
    TokenRange,
    allocate_random,
)

SETTINGS = SliceSettings(slice_width_s=2, slice_count=2)  # window 4 s
WIDTH_MS = SETTINGS.slice_width_ms
ROUND_MS = 500
WRITE_ROUNDS = 48  # 24 s of writes and faults
DRAIN_ROUNDS_MAX = 400
VNODES = 4
STRATEGY = SimpleStrategy(ReplicationFactor.parse(3))
EPOCH_MS = 1_790_000_000_000
CHANNELS = (
    Channel("hub", "ks", "t", "ringflow://127.0.0.31", priority=90, slice_settings=SETTINGS),
    Channel(
        "lake", "ks", "t", "parquet:/lake", priority=10, order=ChannelOrder.LIFO,
        slice_settings=SETTINGS,
    ),
)  # fmt: skip
SEED_ENV = "RINGFLOW_REPLICATION_SIM_SEED"
SEEDS_ENV = "RINGFLOW_REPLICATION_SIM_SEEDS"


def sample_seeds() -> tuple[int, ...]:
    if os.environ.get(SEED_ENV):
        return (int(os.environ[SEED_ENV]),)
    return tuple(range(int(os.environ.get(SEEDS_ENV, "200"))))


SEEDS = sample_seeds()
CLEAN_SEEDS = SEEDS[:100] if SEEDS_ENV not in os.environ else SEEDS
"""The fault-free property is simpler; half the sample keeps CI time down."""


def replay(seed: int, test: str) -> str:
    return f"replay: {SEED_ENV}={seed} pytest tests/sim/test_replication_planner_sim.py -k {test}"


@dataclass(frozen=True)
class Faults:
    crashes: bool = True
    partitions: bool = True
    outages: bool = True
    late_rows: bool = True
    join: bool = True


CLEAN = Faults(crashes=False, partitions=False, outages=False, late_rows=False, join=False)
"""Every node up and holding every row. (A join is left out: writes of one slice before and
after it reach different replica sets, so those copies differ and the union is sent.)"""


@dataclass
class Node:
    """One replica: its capture (open slices, sealed rows kept until dropped) and what it
    published to the replicated tables (copies, watermark)."""

    host: Host
    skew_ms: int
    up: bool = True
    down_until_ms: int = 0
    hidden_until_ms: int = 0  # the job cannot see it until then
    open: dict[SliceKey, list[int]] = field(default_factory=dict)
    rows: dict[SliceKey, list[int]] = field(default_factory=dict)
    published: dict[SliceKey, SealedSlice] = field(default_factory=dict)
    watermark_ms: int | None = None

    @property
    def host_id(self) -> uuid.UUID:
        return self.host.host_id

    def clock(self, now_ms: int) -> int:
        return now_ms + self.skew_ms

    def capture(self, change_id: int, ts_ms: int, token_range: TokenRange, now_ms: int) -> None:
        """Triage by this node's clock (the capture side's rule)."""
        node_now = self.clock(now_ms)
        start = ts_ms // WIDTH_MS * WIDTH_MS
        out_of_sequence = start + SETTINGS.window_ms <= node_now
        if out_of_sequence:
            start = node_now // WIDTH_MS * WIDTH_MS
        key = SliceKey("ks", "t", token_range.left, token_range.right, start, out_of_sequence)
        self.open.setdefault(key, []).append(change_id)

    def seal(self, now_ms: int) -> None:
        """Seal every slice due by this node's clock, publish it, then the watermark."""
        node_now = self.clock(now_ms)
        for key in sorted(self.open):
            if key.slice_start_ms + SETTINGS.window_ms <= node_now:
                rows = self.open.pop(key)
                digest = slice_digest(row_digest({"id": struct.pack(">q", c)}) for c in rows)
                self.rows[key] = rows
                self.published[key] = SealedSlice(key, self.host_id, digest, len(rows), node_now)
        self.watermark_ms = node_now


@dataclass
class Transfer:
    grant: Grant
    done_at_ms: int


@dataclass
class Outcome:
    changes: int
    deliveries: dict[str, Counter[int]]
    captures: Counter[int]
    sent: list[SentRecord]
    rounds: int
    primaries: dict[SliceKey, uuid.UUID]
    """The primary replica (rank 0, today's ring) of each in-sequence key sent."""
    events: Counter[str]
    """How often each fault and each kind of send happened (so a run shows what it tested)."""

    def sends_per_change(self, channel: str) -> float:
        return sum(self.deliveries[channel].values()) / max(1, self.changes)


class ReplicationSim:
    """The model cluster and the job (module docstring)."""

    def __init__(self, seed: int, faults: Faults) -> None:
        self.rng = random.Random(seed)
        self.faults = faults
        self.now_ms = EPOCH_MS
        self.nodes: dict[uuid.UUID, Node] = {}
        self.ring = TokenMetadata()
        for _ in range(self.rng.choice((3, 4))):
            self._add_node()
        self.broker = PermitBroker(permits=self.rng.randint(2, 4), max_pending_per_channel=64)
        policy = BackoffPolicy(first_delay_s=1, max_delay_s=8)  # outages here last seconds
        self.backoff = {c.name: DestinationBackoff(policy) for c in CHANNELS}
        self.destination_down_until = {c.name: 0 for c in CHANNELS}
        for channel in CHANNELS:
            self.broker.configure(channel)
        self.transfers: list[Transfer] = []
        self.sent: list[SentRecord] = []
        self.sent_by_key: dict[SliceKey, list[SentRecord]] = {}
        self.deliveries: dict[str, Counter[int]] = {c.name: Counter() for c in CHANNELS}
        self.captures: Counter[int] = Counter()
        self.events: Counter[str] = Counter()
        self.next_change = 1
        self._replicas_cache: dict[TokenRange, tuple[uuid.UUID, ...]] = {}

    # --- the cluster ------------------------------------------------------------------------

    def _add_node(self) -> Node:
        index = len(self.nodes) + 1
        host = Host(uuid.UUID(int=self.rng.getrandbits(128)), f"127.0.0.{index}", "dc1", "r1")
        tokens = allocate_random(self.ring, VNODES, self.rng)
        self.ring = self.ring.with_tokens(host, tokens)
        self._replicas_cache = {}
        node = Node(host, skew_ms=self.rng.randint(-200, 200))
        self.nodes[host.host_id] = node
        return node

    def replicas_of(self, token_range: TokenRange) -> tuple[uuid.UUID, ...]:
        """Today's replicas of the range's end token, in strategy order."""
        if token_range not in self._replicas_cache:
            hosts = STRATEGY.replicas(token_range.right, self.ring)
            self._replicas_cache[token_range] = tuple(h.host_id for h in hosts)
        return self._replicas_cache[token_range]

    def write(self) -> None:
        token = self.rng.randint(-(2**63) + 1, 2**63 - 1)
        token_range = self.ring.range_ending_at(self.ring.first_token_index(token))
        ts_ms = self.now_ms + self.rng.randint(-200, 200)
        lateness = self.rng.random() if self.faults.late_rows else 1.0
        if lateness < 0.05:
            ts_ms = self.now_ms - self.rng.randint(5_000, 12_000)  # out-of-sequence everywhere
        elif lateness < 0.15:
            ts_ms = self.now_ms - self.rng.randint(2_500, 4_500)  # near the window's edge
        replicas = [self.nodes[h.host_id] for h in STRATEGY.replicas(token, self.ring)]
        up = [node for node in replicas if node.up]
        if not up:
            return  # no replica acknowledged it: not a captured change
        change_id, self.next_change = self.next_change, self.next_change + 1
        for node in up:
            node.capture(change_id, ts_ms, token_range, self.now_ms)
            self.captures[change_id] += 1

    def inject_faults(self) -> None:
        rng, nodes = self.rng, list(self.nodes.values())
        if self.faults.crashes and rng.random() < 0.04:
            candidates = [n for n in nodes if n.up]
            if len(candidates) > len(nodes) - 2:
                node = rng.choice(candidates)
                node.up, node.down_until_ms = False, self.now_ms + rng.randint(1_000, 9_000)
                self.events["faults: node crashes"] += 1
        if self.faults.partitions and rng.random() < 0.03:
            rng.choice(nodes).hidden_until_ms = self.now_ms + rng.randint(1_000, 7_000)
            self.events["faults: job cannot see a node"] += 1
        if self.faults.outages and rng.random() < 0.03:
            name = rng.choice(CHANNELS).name
            self.destination_down_until[name] = self.now_ms + rng.randint(2_000, 14_000)
            self.events["faults: destination outages"] += 1

    def heal(self) -> None:
        for node in self.nodes.values():
            node.down_until_ms = node.hidden_until_ms = 0
        self.destination_down_until = {c.name: 0 for c in CHANNELS}

    def restart_due_nodes(self) -> None:
        for node in self.nodes.values():
            if not node.up and node.down_until_ms <= self.now_ms:
                node.up = True

    def live(self) -> frozenset[uuid.UUID]:
        return frozenset(
            n.host_id for n in self.nodes.values() if n.up and n.hidden_until_ms <= self.now_ms
        )

    # --- the job ----------------------------------------------------------------------------

    def complete_transfers(self) -> None:
        live = self.live()
        remaining = []
        for transfer in self.transfers:
            if transfer.done_at_ms > self.now_ms:
                remaining.append(transfer)
                continue
            send = transfer.grant.send
            if send.node not in live:
                self.broker.release(transfer.grant)  # the read from that node failed
                self.events["transfer failed: its node went down or out of sight"] += 1
                continue
            if self.destination_down_until[send.channel] > self.now_ms:
                self.events["transfer failed: destination away"] += 1
                self.backoff[send.channel].failed(self.now_ms, "destination away")
                self.broker.release(transfer.grant)
                continue
            rows = self.nodes[send.node].rows.get(send.key)
            assert rows is not None, f"{send} in flight but its data was dropped"
            self.deliveries[send.channel].update(rows)
            self._count_send(send.key, send.node)
            record = send.sent(self.now_ms)
            self.sent.append(record)
            self.sent_by_key.setdefault(record.key, []).append(record)
            self.backoff[send.channel].succeeded(self.now_ms)
            self.broker.release(transfer.grant)
        self.transfers = remaining

    def sent_index(self) -> SentIndex:
        """The ``sent`` records of keys some node still holds (the others decide nothing)."""
        held = {key for node in self.nodes.values() for key in node.published}
        return SentIndex.of(r for key in held for r in self.sent_by_key.get(key, ()))

    def _count_send(self, key: SliceKey, node: uuid.UUID) -> None:
        if key.out_of_sequence:
            self.events["copies sent: out-of-sequence"] += 1
            return
        replicas = self.replicas_of(TokenRange(key.range_start, key.range_end))
        rank = replicas.index(node) if node in replicas else None
        self.events[
            f"copies sent: rank {rank}" if rank is not None else "copies sent: unranked"
        ] += 1

    def plan_and_grant(self, index: SentIndex) -> None:
        plan = plan_sends(
            CHANNELS,
            [copy for node in self.nodes.values() for copy in node.published.values()],
            [
                SealWatermark(node.host_id, "ks", "t", node.watermark_ms)
                for node in self.nodes.values()
                if node.watermark_ms is not None
            ],
            index,
            replicas_of=self.replicas_of,
            live=self.live(),
            in_flight=self.broker.in_flight(),
        )
        for channel in CHANNELS:
            reachable = self.backoff[channel.name].may_attempt(self.now_ms)
            self.broker.set_reachable(channel.name, reachable)
            self.broker.offer(channel.name, plan.for_channel(channel.name))
        for grant in self.broker.grant():
            done_at = self.now_ms + ROUND_MS * self.rng.randint(1, 2)
            self.transfers.append(Transfer(grant, done_at))
        self.broker.validate()
        for backoff in self.backoff.values():
            backoff.validate()

    def drop_sent_copies(self, index: SentIndex) -> None:
        for node in self.nodes.values():
            if not node.up:
                continue
            for key, copy in list(node.published.items()):
                if may_drop(copy, CHANNELS, index):
                    del node.published[key]
                    del node.rows[key]

    def round(self, writing: bool) -> None:
        self.now_ms += ROUND_MS
        self.restart_due_nodes()
        self.complete_transfers()
        if writing:
            for _ in range(self.rng.randint(0, 3)):
                self.write()
        for node in self.nodes.values():
            if node.up:
                node.seal(self.now_ms)
        index = self.sent_index()
        self.drop_sent_copies(index)
        self.plan_and_grant(index)
        if writing:
            self.inject_faults()

    def drained(self) -> bool:
        return not self.transfers and not any(
            node.open or node.published for node in self.nodes.values()
        )

    def run(self) -> Outcome:
        join_round = self.rng.randint(WRITE_ROUNDS // 4, WRITE_ROUNDS * 3 // 5)
        for index in range(WRITE_ROUNDS):
            if self.faults.join and index == join_round:
                self._add_node()
                self.events["faults: node joins"] += 1
            self.round(writing=True)
        self.heal()
        rounds = WRITE_ROUNDS
        while not self.drained():
            assert rounds < WRITE_ROUNDS + DRAIN_ROUNDS_MAX, "the job did not drain"
            self.round(writing=False)
            rounds += 1
        primaries = {
            r.key: self.replicas_of(TokenRange(r.key.range_start, r.key.range_end))[0]
            for r in self.sent
            if not r.key.out_of_sequence
        }
        return Outcome(
            self.next_change - 1,
            self.deliveries,
            self.captures,
            self.sent,
            rounds,
            primaries,
            self.events,
        )


@functools.cache
def outcome(seed: int, faults: Faults) -> Outcome:
    return ReplicationSim(seed, faults).run()


def check_outcome(result: Outcome) -> None:
    for channel in CHANNELS:
        delivered = result.deliveries[channel.name]
        missing = [c for c in result.captures if delivered[c] == 0]
        assert not missing, f"{channel.name}: changes never sent: {missing[:10]}"
        over = [c for c in result.captures if delivered[c] > result.captures[c]]
        assert not over, f"{channel.name}: sent more often than captured: {over[:10]}"
    in_sequence = Counter(
        (r.channel, r.key, r.digest) for r in result.sent if not r.key.out_of_sequence
    )
    doubled = [where for where, count in in_sequence.items() if count > 1]
    assert not doubled, f"a slice digest sent twice to a channel: {doubled[:3]}"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_change_reaches_every_channel_under_faults(seed: int) -> None:
    try:
        check_outcome(outcome(seed, Faults()))
    except AssertionError as error:
        raise AssertionError(f"seed {seed}: {error}\n{replay(seed, 'under_faults')}") from None


@pytest.mark.parametrize("seed", CLEAN_SEEDS)
def test_with_every_node_up_each_slice_is_sent_once_per_channel(seed: int) -> None:
    try:
        result = outcome(seed, CLEAN)
        check_outcome(result)
        for channel in CHANNELS:
            counts = Counter(r.key for r in result.sent if r.channel == channel.name)
            assert set(counts.values()) <= {1}, f"{channel.name}: a slice sent twice"
            by_other = [r for r in result.sent if r.node != result.primaries.get(r.key, r.node)]
            assert not by_other, f"sent by a node that is not the active one: {by_other[:2]}"
            assert set(result.deliveries[channel.name].values()) == {1}
            assert result.sends_per_change(channel.name) == 1.0
    except AssertionError as error:
        raise AssertionError(f"seed {seed}: {error}\n{replay(seed, 'every_node_up')}") from None


def test_sends_per_unique_change_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """The figures over the seed sample (printed with -s): sends per unique change per channel
    with faults and without, against "every replica sends" (captures per change)."""
    faulty = [outcome(seed, Faults()) for seed in SEEDS]
    clean = [outcome(seed, CLEAN) for seed in CLEAN_SEEDS]
    changes = sum(r.changes for r in faulty)
    baseline = sum(sum(r.captures.values()) for r in faulty) / changes
    lines = [f"{len(SEEDS)} seeds, {changes} changes under faults; every replica sends: "]
    lines[0] += f"{baseline:.3f} sends per change"
    for channel in CHANNELS:
        name = channel.name
        with_faults = sum(sum(r.deliveries[name].values()) for r in faulty) / changes
        per_seed = [r.sends_per_change(name) for r in faulty]
        clean_sends = sum(sum(r.deliveries[name].values()) for r in clean)
        clean_changes = sum(r.changes for r in clean)
        lines.append(
            f"{name}: {with_faults:.3f} sends per change under faults (worst seed "
            f"{max(per_seed):.3f}); {clean_sends / clean_changes:.3f} with every node up"
        )
        assert 1.0 <= with_faults <= baseline
        assert clean_sends == clean_changes
    events = sum((r.events for r in faulty), Counter[str]())
    lines += [f"  {name}: {count}" for name, count in sorted(events.items())]
    assert all(events[name] > 0 for name in ("copies sent: unranked", "copies sent: rank 1"))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
