"""Precomputed replicas of every ring position, for vectorised and repeated lookups.

Reference: ``shared/reference/cassandra-core.md`` §1.2 and §3.4 (the driver's
``make_token_replica_map`` idea: every token of ``(ring[i-1], ring[i]]`` has the replicas of
``ring[i]``, so one walk per ring position answers every token). A lookup is then a
``np.searchsorted`` on the sorted ring plus a row of a ``(positions, width)`` host-index table.

Rows are padded with -1 when a position has fewer replicas than the widest one (a DC with fewer
nodes than its replication factor).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ringflow.errors import invariant
from ringflow.ring._replication import Replica, ReplicationStrategy
from ringflow.ring._token_metadata import Host, TokenMetadata

HostIndexArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

NO_HOST = -1


class ReplicaMap:
    """Replica plans of every ring position of one ring under one strategy (immutable)."""

    __slots__ = ("_full", "_plans", "_replicas", "strategy", "token_metadata")

    def __init__(self, strategy: ReplicationStrategy, token_metadata: TokenMetadata) -> None:
        self.strategy = strategy
        self.token_metadata = token_metadata
        self._plans = strategy.ring_replica_plans(token_metadata)
        width = max(len(plan) for plan in self._plans)
        # int32 host indices: half the memory traffic of intp when gathering rows.
        self._replicas: HostIndexArray = np.full((len(self._plans), width), NO_HOST, np.int32)
        self._full: BoolArray = np.zeros((len(self._plans), width), dtype=np.bool_)
        for position, plan in enumerate(self._plans):
            indices = [token_metadata.host_index(replica.host) for replica in plan]
            self._replicas[position, : len(plan)] = indices
            self._full[position, : len(plan)] = [replica.is_full for replica in plan]
        self.validate()

    def validate(self) -> None:
        """Rows hold distinct hosts, padding only at the end."""
        for position, plan in enumerate(self._plans):
            hosts = {replica.host for replica in plan}
            invariant(len(hosts) == len(plan), f"ring position {position} repeats a replica")
        invariant(bool(np.all(self._replicas[:, 0] != NO_HOST)), "a ring position has no replica")

    @property
    def width(self) -> int:
        """Columns of :meth:`replica_indices` (the most replicas any position has)."""
        return int(self._replicas.shape[1])

    def replica_plan(self, token: int) -> list[Replica]:
        """Replicas of ``token`` with their full/transient flags (cached plan)."""
        return list(self._plans[self.token_metadata.first_token_index(token)])

    def replicas(self, token: int) -> list[Host]:
        return [replica.host for replica in self.replica_plan(token)]

    def replica_indices(self, tokens: npt.ArrayLike) -> HostIndexArray:
        """``(len(tokens), width)`` host indices of each token's replicas, -1 padded."""
        positions = self.token_metadata.first_token_indices(tokens)
        rows: HostIndexArray = self._replicas[positions]
        return rows

    def full_flags(self, tokens: npt.ArrayLike) -> BoolArray:
        """``(len(tokens), width)``: whether each replica of :meth:`replica_indices` is full."""
        positions = self.token_metadata.first_token_indices(tokens)
        flags: BoolArray = self._full[positions]
        return flags

    def primary_indices(self, tokens: npt.ArrayLike) -> HostIndexArray:
        """Host index of each token's first replica."""
        positions = self.token_metadata.first_token_indices(tokens)
        primaries: HostIndexArray = self._replicas[positions, 0]
        return primaries

    def effective_ownership(self) -> FloatArray:
        """Fraction of the ring each host replicates (``nodetool status`` "Owns (effective)").

        Per DC these sum to the DC's replication factor (fewer when the DC is smaller).
        """
        sizes = np.array(
            [self.token_metadata.range_ending_at(i).size for i in range(len(self._plans))],
            dtype=np.float64,
        )
        ownership = np.zeros(len(self.token_metadata.hosts), dtype=np.float64)
        valid = self._replicas != NO_HOST
        weights = np.broadcast_to(sizes[:, None], self._replicas.shape)
        np.add.at(ownership, self._replicas[valid], weights[valid])
        return ownership
