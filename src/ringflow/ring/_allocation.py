"""Token allocation for a joining host: random, and balanced for a replication factor.

Reference: ``shared/reference/cassandra-core.md`` §4.1 (random path: ``getRandomToken``, avoid
taken tokens) and §4.2 (``allocate_tokens_for_local_replication_factor``). Randomness is always
an injected ``random.Random``.

The balanced allocator works on one allocation ring (see ``_allocation_model``), chosen by §4.2's
grouping rules for the joining host's DC:

* RF <= 1: every node is its own unit, replicas 1;
* racks == RF: one allocation ring per rack (the host's rack), replicas 1;
* racks > RF: racks are the groups, replicas RF;
* one rack: nodes are the groups, replicas RF;
* 1 < racks < RF: refused, as Cassandra refuses it.

With one replica per allocation ring (the first two rules), each new token takes over a slice
of the largest range of the most loaded unit, sized towards the new unit's fair share, with the
take-over ratio clamped to [0.1, 0.9] (Cassandra's ``NoReplicationTokenAllocator`` idea).

Otherwise, while the ring has fewer units or groups than replicas, or fewer tokens than the
host asks for, tokens come from splitting the largest range at a random ratio in
``[1 - 1/sqrt(5), 1 - 1/sqrt(5) + 0.075]``. Otherwise every range midpoint is a candidate; the
best improvement of the squared-deviation measure is taken greedily from a priority queue
whose head is re-scored lazily before it is accepted. A token another DC already uses is bumped
by one.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

from ringflow.ring._allocation_model import NEW_TOKEN, AllocationRing, tokens_between
from ringflow.ring._errors import RingError
from ringflow.ring._murmur3 import normalise_token
from ringflow.ring._sharder import MAX_TOKEN, MIN_TOKEN
from ringflow.ring._token_metadata import Host, TokenMetadata

MAX_TOKENS_PER_HOST = 16384
_SPLIT_RATIO_LOW = 1 - 1 / math.sqrt(5)
_SPLIT_RATIO_HIGH = _SPLIT_RATIO_LOW + 0.075

AllocatorName = Literal["random", "balanced"]


def random_token(rng: random.Random) -> int:
    """A uniformly random key token (``Murmur3Partitioner.getRandomToken``, normalised)."""
    return normalise_token(rng.getrandbits(64) + MIN_TOKEN)


def _check_token_count(num_tokens: int) -> None:
    if not isinstance(num_tokens, int) or isinstance(num_tokens, bool):
        raise RingError(f"num_tokens must be an int, got {num_tokens!r}")
    if not 1 <= num_tokens <= MAX_TOKENS_PER_HOST:
        raise RingError(f"num_tokens must be in 1..{MAX_TOKENS_PER_HOST}, got {num_tokens}")


def allocate_random(
    token_metadata: TokenMetadata, num_tokens: int, rng: random.Random
) -> list[int]:
    """``num_tokens`` random tokens, none already on the ring, none repeated."""
    _check_token_count(num_tokens)
    return _random_tokens(set(token_metadata.sorted_tokens), num_tokens, rng)


def _random_tokens(taken: set[int], num_tokens: int, rng: random.Random) -> list[int]:
    """Random tokens not in ``taken``; adds them to ``taken``."""
    tokens: list[int] = []
    while len(tokens) < num_tokens:
        token = random_token(rng)
        if token not in taken:
            taken.add(token)
            tokens.append(token)
    return tokens


def _grouping(
    host: Host, rack_count: int, replication_factor: int
) -> tuple[Literal["node", "rack", "rack-ring"], int]:
    """§4.2: what a unit's group is, and how many replicas the allocation ring models."""
    if replication_factor <= 1:
        return "node", 1
    if rack_count == replication_factor:
        return "rack-ring", 1
    if rack_count > replication_factor:
        return "rack", replication_factor
    if rack_count == 1:
        return "node", replication_factor
    raise RingError(
        f"token allocation for {host}: the number of racks ({rack_count}) in datacenter "
        f"{host.dc!r} is lower than its replication factor ({replication_factor}); use one "
        f"rack, or at least as many racks as the replication factor"
    )


def _allocation_ring(
    token_metadata: TokenMetadata, host: Host, rack_count: int, replication_factor: int
) -> tuple[AllocationRing, int, int]:
    """The model ring, the new host's unit id and its group id (small ints hash fast)."""
    kind, replicas = _grouping(host, rack_count, replication_factor)
    rack_ids: dict[str, int] = {}
    entries: list[tuple[int, Hashable, Hashable]] = []
    for unit, member in enumerate(token_metadata.hosts):
        if member.dc != host.dc or (kind == "rack-ring" and member.rack != host.rack):
            continue
        group = rack_ids.setdefault(member.rack, len(rack_ids)) if kind == "rack" else unit
        entries.extend((token, unit, group) for token in token_metadata.tokens_of(member))
    new_unit = len(token_metadata.hosts)
    new_group = rack_ids.setdefault(host.rack, len(rack_ids)) if kind == "rack" else new_unit
    return AllocationRing(entries, replicas), new_unit, new_group


class _BalancedAllocation:
    """One host's allocation: the ring model, the candidate queue and the scoring."""

    def __init__(
        self,
        ring: AllocationRing,
        unit: Hashable,
        group: Hashable,
        num_tokens: int,
        taken: set[int],
    ) -> None:
        self.ring = ring
        self.unit = unit
        self.group = group
        self.num_tokens = num_tokens
        self.taken = taken
        self.optimum = ring.replicas / (len(ring) + num_tokens)
        self.queue: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0

    def needs_splits(self, units_before: int) -> bool:
        ring = self.ring
        groups_after = len(set(ring.groups) | {self.group})
        return (
            units_before < ring.replicas
            or groups_after < ring.replicas
            or self.num_tokens > len(ring)
        )

    def free_token(self, token: int) -> int:
        """``token``, bumped past tokens another DC or rack already uses (increaseSlightly).

        MIN_TOKEN is skipped too: it is never a key token, so no node should sit on it.
        """
        while token in self.taken or token == MIN_TOKEN:
            token = MIN_TOKEN + 1 if token in (MAX_TOKEN, MIN_TOKEN) else token + 1
        return token

    def split_largest(self, rng: random.Random) -> int:
        tokens = self.ring.tokens
        if not tokens:
            return self.free_token(random_token(rng))
        counts = [tokens_between(tokens[i - 1], tokens[i]) for i in range(len(tokens))]
        largest = max(range(len(tokens)), key=counts.__getitem__)
        offset = int(counts[largest] * rng.uniform(_SPLIT_RATIO_LOW, _SPLIT_RATIO_HIGH))
        offset = min(max(offset, 1), counts[largest] - 1)
        return self.free_token(_wrap(tokens[largest - 1] + offset))

    def score(self, token: int) -> float:
        """Change of the squared-deviation measure if ``token`` is added (lower is better)."""
        ring, optimum = self.ring, self.optimum
        token_delta, unit_delta = ring.ownership_delta(token, self.unit, self.group)
        change = 0.0
        for index, delta in token_delta.items():
            if index == NEW_TOKEN:
                change += (delta - optimum) ** 2
            else:
                owned = ring.token_ownership[index]
                change += (owned + delta - optimum) ** 2 - (owned - optimum) ** 2
        for unit, delta in unit_delta.items():
            if unit != self.unit:
                count = ring.unit_token_counts[unit]
                owned = ring.unit_ownership[unit]
                change += ((owned + delta) / count - optimum) ** 2 - (owned / count - optimum) ** 2
        return change + self._new_unit_change(unit_delta.get(self.unit, 0.0))

    def _new_unit_change(self, delta: float) -> float:
        placed = self.ring.unit_token_counts.get(self.unit, 0)
        owned = self.ring.unit_ownership.get(self.unit, 0.0)
        before = 0.0
        if placed:
            before = placed / self.num_tokens * (owned / placed - self.optimum) ** 2
        deviation_after = (owned + delta) / (placed + 1) - self.optimum
        return (placed + 1) / self.num_tokens * deviation_after**2 - before

    def push_candidate(self, left: int, right: int) -> None:
        count = tokens_between(left, right)
        if count < 2:
            return
        token = self.free_token(_wrap(left + count // 2))
        if tokens_between(left, token) >= count:
            return
        self.sequence += 1
        heapq.heappush(self.queue, (self.score(token), self.sequence, token, left, right))

    def seed_candidates(self) -> None:
        tokens = self.ring.tokens
        for index in range(len(tokens)):
            self.push_candidate(tokens[index - 1], tokens[index])

    def _still_a_range(self, left: int, right: int) -> bool:
        tokens = self.ring.tokens
        index = bisect.bisect_left(tokens, right)
        return index < len(tokens) and tokens[index] == right and tokens[index - 1] == left

    def best_candidate(self) -> int:
        """Pop candidates, re-scoring the head lazily, until one still beats the next."""
        while self.queue:
            _, _, token, left, right = heapq.heappop(self.queue)
            if not self._still_a_range(left, right):
                continue
            fresh = self.score(token)
            if not self.queue or fresh <= self.queue[0][0]:
                self.insert(token)
                self.push_candidate(left, token)
                self.push_candidate(token, right)
                return token
            self.sequence += 1
            heapq.heappush(self.queue, (fresh, self.sequence, token, left, right))
        raise RingError("the allocation ring has no range left to split")

    def insert(self, token: int) -> None:
        self.ring.insert(token, self.unit, self.group)
        self.taken.add(token)


def _wrap(value: int) -> int:
    return (value - MIN_TOKEN) % 2**64 + MIN_TOKEN


def _take_over_tokens(allocation: _BalancedAllocation) -> list[int]:
    """Replicas == 1 (Cassandra's NoReplicationTokenAllocator idea): each new token takes a
    slice of the largest range of the most loaded unit, sized towards the new unit's share."""
    ring = allocation.ring
    share_per_unit = 1.0 / (len(set(ring.units)) + 1)
    share_per_token = share_per_unit / allocation.num_tokens
    tokens = []
    for _ in range(allocation.num_tokens):
        loaded = max(
            (unit for unit in ring.unit_ownership if unit != allocation.unit),
            key=lambda unit: ring.unit_ownership[unit],
        )
        indices = [i for i, unit in enumerate(ring.units) if unit == loaded]
        largest = max(indices, key=ring.range_fraction)
        fraction = ring.range_fraction(largest)
        excess = ring.unit_ownership[loaded] - share_per_unit
        ratio = min(max(min(share_per_token, excess) / fraction, 0.1), 0.9)
        count = tokens_between(ring.tokens[largest - 1], ring.tokens[largest])
        offset = min(max(int(count * ratio), 1), count - 1)
        token = allocation.free_token(_wrap(ring.tokens[largest - 1] + offset))
        allocation.insert(token)
        tokens.append(token)
    return tokens


def allocate_balanced(
    token_metadata: TokenMetadata,
    host: Host,
    num_tokens: int,
    replication_factor: int,
    rng: random.Random,
    *,
    planned_rack_count: int | None = None,
) -> list[int]:
    """Tokens for ``host`` that keep the replicated ownership of its DC balanced (§4.2).

    ``replication_factor`` is the RF of the host's DC. ``planned_rack_count`` is the number of
    racks the DC will have; it lets a DC that is still growing towards its racks be allocated
    (Cassandra refuses 1 < racks < RF, even transiently). By default the racks on the ring plus
    the host's own are counted.
    """
    _check_token_count(num_tokens)
    if not isinstance(replication_factor, int) or replication_factor < 1:
        raise RingError(f"replication_factor must be an int >= 1, got {replication_factor!r}")
    if host in token_metadata:
        raise RingError(f"host {host} is already on the ring")
    rack_count = len(token_metadata.racks_of(host.dc) | {host.rack})
    if planned_rack_count is not None:
        if planned_rack_count < rack_count:
            raise RingError(
                f"planned_rack_count {planned_rack_count} is below the {rack_count} racks "
                f"datacenter {host.dc!r} already has"
            )
        rack_count = planned_rack_count
    ring, unit, group = _allocation_ring(token_metadata, host, rack_count, replication_factor)
    units_before = len(set(ring.units))
    allocation = _BalancedAllocation(
        ring, unit, group, num_tokens, set(token_metadata.sorted_tokens)
    )
    if allocation.needs_splits(units_before):
        tokens = []
        for _ in range(num_tokens):
            token = allocation.split_largest(rng)
            # The ownership model is not consulted while splitting: skip its upkeep.
            allocation.ring.insert_unscored(token, unit, group)
            allocation.taken.add(token)
            tokens.append(token)
        return tokens
    if ring.replicas == 1:
        return _take_over_tokens(allocation)
    allocation.seed_candidates()
    return [allocation.best_candidate() for _ in range(num_tokens)]


def grow_ring(
    hosts: Sequence[Host],
    num_tokens: int,
    rng: random.Random,
    *,
    allocator: AllocatorName = "balanced",
    replication_factor_by_dc: Mapping[str, int] | None = None,
    planned_rack_count_by_dc: Mapping[str, int] | None = None,
    token_metadata: TokenMetadata | None = None,
) -> TokenMetadata:
    """Add ``hosts`` one by one, each with ``num_tokens`` tokens from ``allocator``.

    ``replication_factor_by_dc`` gives the balanced allocator each DC's RF (default 3).
    """
    ring = token_metadata if token_metadata is not None else TokenMetadata()
    if allocator == "random":
        # Random picks only need the taken tokens: build the ring once at the end.
        _check_token_count(num_tokens)
        mapping: dict[Host, Sequence[int]] = {h: ring.tokens_of(h) for h in ring.hosts}
        taken = set(ring.sorted_tokens)
        for host in hosts:
            if host in mapping:
                raise RingError(f"host {host} is already on the ring")
            mapping[host] = _random_tokens(taken, num_tokens, rng)
        return TokenMetadata(mapping)
    if allocator != "balanced":
        raise RingError(f"unknown allocator {allocator!r}: expected 'random' or 'balanced'")
    factors = replication_factor_by_dc or {}
    racks = planned_rack_count_by_dc or {}
    for host in hosts:
        tokens = allocate_balanced(
            ring,
            host,
            num_tokens,
            factors.get(host.dc, 3),
            rng,
            planned_rack_count=racks.get(host.dc),
        )
        ring = ring.with_tokens(host, tokens)
    return ring
