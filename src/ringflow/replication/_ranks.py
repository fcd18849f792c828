"""Ranks and active ranges (seed 002 "Active Node Monitoring Algorithm"; REPLICATION.md "Words").

A range's replicas in the keyspace's strategy order are its ranks: the first is the primary,
then the secondary, the tertiary, and so on. Seed 002 remaps this to ``node => [{primary
ranges}, {secondary ranges}, {tertiary ranges}]`` (:meth:`RangeRanks.ranges_by_rank`). The
**active** node of a range is the first live node in that order (:meth:`RangeRanks.active_node`):
with every node live each node is active for its primary ranges; when one dies its primary
ranges pass to the next live replica, and so on down to the last one. A range whose replicas
are all dead has no active node.

The caller supplies the order (``replicas_of``): the ring's replicas for the range's end token
with the keyspace's strategy, computed with the *current* ring, so a slice keyed by the range of
an older CDC generation is ranked by today's owners, and a node that held it before a topology
change is unranked for it (REPLICATION.md decision 9; the planner ranks it after everyone).

Pure: no I/O, no clock; nodes are host ids (``uuid.UUID``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ringflow.replication._model import ReplicationArgumentError, SliceKey
from ringflow.ring import RingError, TokenRange

ReplicasOf = Callable[[TokenRange], Sequence[uuid.UUID]]
"""A range's replicas in strategy order (primary first)."""


def range_of(key: SliceKey) -> TokenRange:
    """The token range ``(range_start, range_end]`` a slice was captured in."""
    try:
        return TokenRange(key.range_start, key.range_end)
    except RingError as error:  # SliceKey checks int64 already; kept for a clear type
        raise ReplicationArgumentError(f"slice {key}: {error}") from None


@dataclass(frozen=True, slots=True)
class RankedRange:
    """One range and its replicas in strategy order (rank 0 is the primary)."""

    range: TokenRange
    replicas: tuple[uuid.UUID, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.range, TokenRange):
            raise ReplicationArgumentError(f"range must be a TokenRange, got {self.range!r}")
        if not self.replicas:
            raise ReplicationArgumentError(f"range {self.range}: a range needs a replica")
        for node in self.replicas:
            if not isinstance(node, uuid.UUID):
                raise ReplicationArgumentError(
                    f"range {self.range}: a replica is a host id (uuid.UUID), got {node!r}"
                )
        if len(set(self.replicas)) != len(self.replicas):
            raise ReplicationArgumentError(
                f"range {self.range}: a node appears twice among its replicas {self.replicas}"
            )

    def rank_of(self, node: uuid.UUID) -> int | None:
        """0 for the primary, 1 for the secondary...; None when ``node`` is not a replica."""
        try:
            return self.replicas.index(node)
        except ValueError:
            return None

    def active(self, live: Collection[uuid.UUID]) -> uuid.UUID | None:
        """The first live replica in strategy order; None when every replica is dead."""
        return next((node for node in self.replicas if node in live), None)


@dataclass(frozen=True, slots=True)
class RangeRanks:
    """The ranks of a set of ranges (build it with :func:`rank_ranges`)."""

    ranked: tuple[RankedRange, ...]
    _by_range: Mapping[TokenRange, RankedRange] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        by_range: dict[TokenRange, RankedRange] = {}
        for entry in self.ranked:
            if not isinstance(entry, RankedRange):
                raise ReplicationArgumentError(f"expected RankedRange entries, got {entry!r}")
            if entry.range in by_range:
                raise ReplicationArgumentError(f"range {entry.range} is ranked twice")
            by_range[entry.range] = entry
        object.__setattr__(self, "_by_range", by_range)

    def __contains__(self, token_range: object) -> bool:
        return token_range in self._by_range

    def ranges(self) -> tuple[TokenRange, ...]:
        return tuple(entry.range for entry in self.ranked)

    def nodes(self) -> frozenset[uuid.UUID]:
        """Every node ranked for some range."""
        return frozenset(node for entry in self.ranked for node in entry.replicas)

    def replicas(self, token_range: TokenRange) -> tuple[uuid.UUID, ...]:
        """The replicas of ``token_range`` in strategy order."""
        return self._entry(token_range).replicas

    def rank_of(self, token_range: TokenRange, node: uuid.UUID) -> int | None:
        """``node``'s rank for ``token_range`` (0 = primary), None when it is not a replica."""
        return self._entry(token_range).rank_of(node)

    def active_node(self, token_range: TokenRange, live: Collection[uuid.UUID]) -> uuid.UUID | None:
        """The first live replica of ``token_range``; None when all its replicas are dead."""
        return self._entry(token_range).active(live)

    def ranges_by_rank(self, node: uuid.UUID) -> tuple[frozenset[TokenRange], ...]:
        """``node``'s ranges by rank: (primary ranges, secondary ranges, ...), as long as the
        largest replica list (empty sets where it holds nothing at that rank)."""
        depth = max((len(entry.replicas) for entry in self.ranked), default=0)
        by_rank: list[set[TokenRange]] = [set() for _ in range(depth)]
        for entry in self.ranked:
            rank = entry.rank_of(node)
            if rank is not None:
                by_rank[rank].add(entry.range)
        return tuple(frozenset(ranges) for ranges in by_rank)

    def active_ranges(self, node: uuid.UUID, live: Collection[uuid.UUID]) -> frozenset[TokenRange]:
        """The ranges ``node`` is active for: those whose first live replica is ``node``."""
        return frozenset(entry.range for entry in self.ranked if entry.active(live) == node)

    def _entry(self, token_range: TokenRange) -> RankedRange:
        try:
            return self._by_range[token_range]
        except KeyError:
            raise ReplicationArgumentError(f"range {token_range} is not ranked") from None


def rank_ranges(ranges: Iterable[TokenRange], replicas_of: ReplicasOf) -> RangeRanks:
    """Rank each distinct range of ``ranges`` by ``replicas_of`` (called once per range)."""
    ranked: dict[TokenRange, RankedRange] = {}
    for token_range in ranges:
        if token_range not in ranked:
            ranked[token_range] = RankedRange(token_range, tuple(replicas_of(token_range)))
    return RangeRanks(tuple(ranked.values()))
