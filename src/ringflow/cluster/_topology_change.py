"""Topology changes as pure functions: who is joining or leaving, the ring after the change,
pending replicas, which token ranges move where, the tokens of a joining node, and the CDC
colocation rule while the ring changes.

References: cassandra-core.md §4.2 (balanced allocation), §5 (pending replicas raise blockFor),
§8 (STATUS ``BOOT,<token>``/``LEAVING,<token>``/``LEFT,<token>``, ``TokenMetadata`` with
bootstrap and leaving endpoints, ``calculatePendingRanges``); scylla-cdc.md §2, §9 (a new
generation per topology change), seed 000 "Generation switching".

Rules:

* A *transition* is an endpoint gossiping a complete identity (HOST_ID, DC, RACK, TOKENS) and
  STATUS ``BOOT`` (joining) or ``LEAVING``. The *future ring* is the current ring (NORMAL
  members) plus every joining endpoint's tokens, minus every leaving endpoint.
* The *pending replicas* of a token are its replicas in the future ring that are not replicas
  in the current ring. Writes go to natural + pending replicas and wait for the pending ones
  too (``_consistency.block_for_write``); reads use the natural replicas only.
* Ranges are cut at every token of both rings, so inside one piece ``(low, high]`` the replicas
  of each ring are those of ``high``. A joining node pulls each piece it gains from one source:
  the replica that loses the piece when it is alive (Cassandra's strict source: the data being
  handed over), else any live current replica. A leaving node pushes each piece it holds to every
  replica that gains it.
* CDC colocation (seed 000 "Vnode-colocation"): a log row is written with its base row in one
  unit to the same targets, natural + pending. It is *accepted* when the stream's replicas equal
  the base's in the current ring, or, while a change is in progress, in the future ring. The
  second case happens for a generation made for the future ring (a decommission's coarser
  vnodes) once it operates: the targets (natural + pending) contain the future replicas, so once
  the change completes every log row is on its stream's replicas; a log read inside the window
  may miss such rows on the old replicas (as in Scylla's gossip era). A generation that refines
  both rings (a bootstrap's) is colocated in both.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ringflow.errors import RingflowError
from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    ReplicationStrategy,
    TokenMetadata,
    allocate_balanced,
    allocate_random,
)

BOOT_STATUS = "BOOT"
LEAVING_STATUS = "LEAVING"
LEFT_STATUS = "LEFT"
NORMAL_STATUS = "NORMAL"


class Change(Enum):
    JOIN = "join"
    LEAVE = "leave"


@dataclass(frozen=True, slots=True)
class Transition:
    """An endpoint joining or leaving the ring, with its tokens."""

    host: Host
    tokens: tuple[int, ...]
    change: Change


def status_word(status: str | None) -> str:
    """``BOOT,123`` -> ``BOOT``; None -> ``""``."""
    return "" if status is None else status.split(",", 1)[0]


def status_value(word: str, tokens: Sequence[int]) -> str:
    """Cassandra's STATUS form: ``<word>,<first token>``."""
    return f"{word},{min(tokens)}" if tokens else word


def transition_of(
    endpoint: str,
    status: str | None,
    host_id: str | None,
    dc: str | None,
    rack: str | None,
    tokens: str | None,
) -> Transition | None:
    """The transition an endpoint's gossip describes, or None (NORMAL, unknown, incomplete)."""
    word = status_word(status)
    if word not in (BOOT_STATUS, LEAVING_STATUS):
        return None
    if host_id is None or dc is None or rack is None or not tokens:
        return None
    try:
        host = Host(uuid.UUID(host_id), endpoint, dc, rack)
        parsed = tuple(int(part) for part in tokens.split(",") if part)
    except ValueError:
        return None
    change = Change.JOIN if word == BOOT_STATUS else Change.LEAVE
    return Transition(host, parsed, change) if parsed else None


def future_ring(current: TokenMetadata, transitions: Iterable[Transition]) -> TokenMetadata:
    """The ring once every transition completed. A joining node claiming a token already taken
    is left out (it cannot become NORMAL; two nodes bootstrapping at once with stale views can
    do that, which is why a node only announces BOOT when no other change is in progress)."""
    future = current
    for transition in sorted(transitions, key=lambda t: t.host.endpoint):
        if transition.change is Change.JOIN:
            taken = set(future.sorted_tokens)
            if transition.host not in future and not taken & set(transition.tokens):
                future = future.with_tokens(transition.host, transition.tokens)
        elif transition.host in future:
            future = future.without_host(transition.host)
    return future


def pending_replicas(
    token: int,
    current: TokenMetadata,
    strategy: ReplicationStrategy,
    future: TokenMetadata,
    future_strategy: ReplicationStrategy,
) -> tuple[Host, ...]:
    """Replicas of ``token`` in the future ring that are not replicas in the current one."""
    if len(future) == 0:
        return ()
    natural = set(strategy.replicas(token, current)) if len(current) else set()
    return tuple(h for h in future_strategy.replicas(token, future) if h not in natural)


def ring_pieces(*rings: TokenMetadata) -> list[tuple[int, int]]:
    """The token space cut at every token of ``rings``: non-wrapping ``(low, high]`` pieces
    covering (MIN, MAX]; a piece's replicas in each ring are those of its ``high``."""
    tokens = sorted({t for ring in rings for t in ring.sorted_tokens if t != MIN_TOKEN})
    pieces = []
    cursor = MIN_TOKEN
    for token in tokens:
        pieces.append((cursor, token))
        cursor = token
    if cursor != MAX_TOKEN:
        pieces.append((cursor, MAX_TOKEN))
    return pieces


@dataclass(frozen=True, slots=True)
class StreamTask:
    """Move ``(low, high]`` of every table of ``keyspace`` from ``source`` to ``target``."""

    keyspace: str
    low: int
    high: int
    source: Host
    target: Host


StrategyOf = Callable[[TokenMetadata], ReplicationStrategy]
"""The keyspace's replication strategy for a ring (the everywhere keyspace's depends on it)."""


def _join_neighbours(tasks: list[StreamTask]) -> list[StreamTask]:
    joined: list[StreamTask] = []
    for task in tasks:
        last = joined[-1] if joined else None
        if (
            last is not None
            and last.high == task.low
            and (last.source, last.target) == (task.source, task.target)
        ):
            joined[-1] = StreamTask(task.keyspace, last.low, task.high, task.source, task.target)
        else:
            joined.append(task)
    return joined


def join_plan(
    keyspace: str,
    joining: Host,
    current: TokenMetadata,
    future: TokenMetadata,
    strategy_of: StrategyOf,
    alive: Callable[[Host], bool],
) -> list[StreamTask]:
    """What ``joining`` pulls for ``keyspace``: every piece it gains, from one live source.
    Raises ``StreamPlanError`` when a piece has no live current replica."""
    now, then = strategy_of(current), strategy_of(future)
    tasks = []
    for low, high in ring_pieces(current, future):
        gains = joining in then.replicas(high, future)
        holders = [h for h in now.replicas(high, current) if h != joining] if len(current) else []
        if not gains or joining in holders:
            continue
        kept = set(then.replicas(high, future))
        losers = [h for h in holders if h not in kept and alive(h)]
        live = losers or [h for h in holders if alive(h)]
        if not live:
            raise StreamPlanError(f"no live replica holds ({low}, {high}] of {keyspace}")
        tasks.append(StreamTask(keyspace, low, high, live[0], joining))
    return _join_neighbours(tasks)


def leave_plan(
    keyspace: str,
    leaving: Host,
    current: TokenMetadata,
    future: TokenMetadata,
    strategy_of: StrategyOf,
) -> list[StreamTask]:
    """What ``leaving`` pushes for ``keyspace``: each piece it holds, to every host gaining it."""
    now, then = strategy_of(current), strategy_of(future)
    tasks = []
    for low, high in ring_pieces(current, future):
        holders = now.replicas(high, current)
        if leaving not in holders or len(future) == 0:
            continue
        for target in then.replicas(high, future):
            if target not in holders:
                tasks.append(StreamTask(keyspace, low, high, leaving, target))
    tasks.sort(key=lambda t: (t.target.endpoint, t.low))
    return _join_neighbours(tasks)


def restream_plan(
    keyspace: str,
    removed: Host,
    current: TokenMetadata,
    future: TokenMetadata,
    strategy_of: StrategyOf,
    alive: Callable[[Host], bool],
) -> list[StreamTask]:
    """``removenode``: the pieces the dead ``removed`` held, pulled by each host gaining them
    from a live surviving replica."""
    now, then = strategy_of(current), strategy_of(future)
    tasks = []
    for low, high in ring_pieces(current, future):
        holders = now.replicas(high, current)
        if removed not in holders or len(future) == 0:
            continue
        survivors = [h for h in holders if h != removed and alive(h)]
        for target in then.replicas(high, future):
            if target in holders:
                continue
            if not survivors:
                raise StreamPlanError(f"no live replica holds ({low}, {high}] of {keyspace}")
            tasks.append(StreamTask(keyspace, low, high, survivors[0], target))
    tasks.sort(key=lambda t: (t.target.endpoint, t.source.endpoint, t.low))
    return _join_neighbours(tasks)


class StreamPlanError(RingflowError):
    """A range cannot be streamed: none of its replicas is alive."""


def choose_tokens(
    current: TokenMetadata,
    host: Host,
    num_tokens: int,
    replication_factor: int,
    rng: random.Random,
) -> tuple[int, ...]:
    """Balanced tokens for a joining ``host`` (replication-aware, cassandra-core.md §4.2); random
    tokens when the allocator cannot place them (an empty DC, too few nodes)."""
    racks = len(current.racks_of(host.dc) | {host.rack}) if len(current) else 1
    try:
        tokens = allocate_balanced(
            current, host, num_tokens, max(1, replication_factor), rng, planned_rack_count=racks
        )
    except RingflowError:
        tokens = allocate_random(current, num_tokens, rng)
    return tuple(sorted(tokens))


def colocated(
    base: int,
    log: int,
    current: TokenMetadata,
    strategy: ReplicationStrategy,
    future: TokenMetadata | None = None,
    future_strategy: ReplicationStrategy | None = None,
) -> bool:
    """The module's colocation rule: the same replicas in the current ring, or (during a
    change) in the future ring."""
    if set(strategy.replicas(base, current)) == set(strategy.replicas(log, current)):
        return True
    if future is None or future_strategy is None or len(future) == 0:
        return False
    return set(future_strategy.replicas(base, future)) == set(future_strategy.replicas(log, future))


def sharding_of(
    ring: TokenMetadata, sharding_by_host: Mapping[Host, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """Each token of ``ring`` with its owner's (shard count, ignore msb): the generator's input
    (hosts without known sharding count as one shard, ignore msb 12)."""
    result = {}
    for host in ring.hosts:
        sharding = sharding_by_host.get(host, (1, 12))
        for token in ring.tokens_of(host):
            result[token] = sharding
    return result


REMOVING = "removing"
REMOVED = "removed"


def encode_removals(removals: Mapping[uuid.UUID, str]) -> str:
    """The REMOVAL_COORDINATOR value of the node coordinating ``removenode``s:
    ``removing:<host id>;removed:<host id>...`` (sorted)."""
    return ";".join(f"{word}:{host_id}" for host_id, word in sorted(removals.items(), key=str))


def decode_removals(value: str | None) -> dict[uuid.UUID, str]:
    """``encode_removals`` reversed; malformed parts are ignored."""
    removals: dict[uuid.UUID, str] = {}
    for part in (value or "").split(";"):
        word, _, host_id = part.partition(":")
        if word in (REMOVING, REMOVED):
            try:
                removals[uuid.UUID(host_id)] = word
            except ValueError:
                continue
    return removals
