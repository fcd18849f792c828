"""Ownership report: how much of the ring each host replicates under a keyspace's strategy.

Reference: ``shared/reference/cassandra-core.md`` §4.2 (quality metric: replicated ownership,
"max/mean, min/mean, stddev" as ``TokenAllocation.replicatedOwnershipStats`` logs it) and §4.3.
Effective ownership is ``nodetool status``'s "Owns (effective)": the fraction of the ring whose
replicas include the host, so each DC's hosts sum to the DC's replication factor. Primary
ownership is plain "Owns": the fraction in the host's own ranges ``(predecessor, token]``.
Summaries are per DC (allocation balances each DC on its own) and over all hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ringflow.ring._replica_map import ReplicaMap
from ringflow.ring._replication import ReplicationStrategy
from ringflow.ring._token_metadata import Host, TokenMetadata


@dataclass(frozen=True, slots=True)
class HostOwnership:
    """One host's line of the report."""

    host: Host
    token_count: int
    effective_ownership: float  # fraction of the ring replicated on the host; 0.25 is 25 %
    primary_ownership: float  # fraction of the ring in the host's own (primary) ranges


@dataclass(frozen=True, slots=True)
class OwnershipSummary:
    """Balance of a set of hosts: ratios to the mean ownership (1.0 is perfect)."""

    host_count: int
    mean_ownership: float
    max_over_mean: float
    min_over_mean: float
    stddev_over_mean: float


@dataclass(frozen=True, slots=True)
class OwnershipReport:
    rows: tuple[HostOwnership, ...]
    overall: OwnershipSummary
    by_dc: tuple[tuple[str, OwnershipSummary], ...]

    def summary_of(self, dc: str) -> OwnershipSummary:
        return dict(self.by_dc)[dc]


def summarise(ownerships: list[float]) -> OwnershipSummary:
    """Ratios of max, min and population standard deviation to the mean."""
    count = len(ownerships)
    mean = math.fsum(ownerships) / count if count else 0.0
    if mean <= 0.0:
        return OwnershipSummary(count, mean, 0.0, 0.0, 0.0)
    variance = math.fsum((value - mean) ** 2 for value in ownerships) / count
    return OwnershipSummary(
        host_count=count,
        mean_ownership=mean,
        max_over_mean=max(ownerships) / mean,
        min_over_mean=min(ownerships) / mean,
        stddev_over_mean=math.sqrt(variance) / mean,
    )


def ownership_report(
    token_metadata: TokenMetadata, strategy: ReplicationStrategy
) -> OwnershipReport:
    """Effective ownership of every host of ``token_metadata`` under ``strategy``."""
    ownership = ReplicaMap(strategy, token_metadata).effective_ownership().tolist()
    rows = tuple(
        HostOwnership(
            host,
            len(token_metadata.tokens_of(host)),
            ownership[index],
            math.fsum(token_range.size for token_range in token_metadata.ranges_of(host)),
        )
        for index, host in enumerate(token_metadata.hosts)
    )
    by_dc = []
    for dc in token_metadata.datacenters():
        values = [row.effective_ownership for row in rows if row.host.dc == dc]
        if any(values):
            by_dc.append((dc, summarise(values)))
    return OwnershipReport(rows, summarise(ownership), tuple(by_dc))
