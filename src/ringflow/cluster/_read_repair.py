"""Blocking read repair: what each stale replica lacks, and waiting for enough of them to apply it.

Owns ``shared/reference/cassandra-core.md`` §7.2 "Blocking read repair" (C41
``service/reads/repair/BlockingReadRepair.java``, ``BlockingPartitionRepair.java``) and seed 003
"Replica Synchronization". The read path (``_read_path``) decides *when* to repair; this module
decides *what* to send and *how many acks* to wait for.

Rules:

* The repair of a replica is the part of the reconciled partition it does not hold, computed at
  row granularity: the partition deletion if it differs, the static row if it differs, each
  clustered row whose canonical form differs from the replica's, each range tombstone the
  replica lacks. The row sent is the reconciled row, which supersedes the replica's version, so
  applying it (LWW merge) leaves the replica with exactly the reconciled row. Cassandra sends
  cell-level diffs (``RowDiffListener``); whole rows are a coarser, equally correct
  approximation. A replica whose version equals the reconciled partition gets nothing.
* Repairs go to every participant that lacks something, but the client waits only for the
  write quorum of the level (``block_for_write``), minus the participants already in sync
  (Cassandra subtracts them from the latch). With LOCAL_* levels only local-DC replicas count,
  both as in-sync participants and as acks: a remote repair is sent, never awaited.
* ``ReadRepairMode.NONE`` (the table option ``read_repair = 'NONE'``) still reconciles for the
  client but writes nothing back: partition-level write atomicity, no monotonic reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import final

from ringflow.cluster._consistency import (
    DATACENTER_LOCAL,
    ConsistencyLevel,
    block_for_write,
)
from ringflow.cluster._digest import canonical_partition
from ringflow.cluster._messages import Verb
from ringflow.errors import InvalidRequest, invariant
from ringflow.ring import Host, ReplicationStrategy
from ringflow.schema import Mutation, merge_mutations


class ReadRepairMode(Enum):
    """The table option ``read_repair`` (CASSANDRA-14635)."""

    BLOCKING = "BLOCKING"
    NONE = "NONE"


@dataclass(frozen=True, slots=True)
class SendRepair:
    """Action: send ``mutation`` to ``replica`` (a MUTATION_REQ); answer via ``on_repair_*``."""

    replica: Host
    request_id: int
    mutation: Mutation

    @property
    def verb(self) -> Verb:
        return Verb.MUTATION_REQ


def reconcile_versions(versions: Sequence[Mutation | None]) -> Mutation | None:
    """The LWW merge of every replica's version (``None`` when no replica holds anything)."""
    merged: Mutation | None = None
    for version in versions:
        if version is None:
            continue
        merged = version if merged is None else merge_mutations(merged, version)
    return canonical_partition(merged)


def repair_mutation(merged: Mutation | None, version: Mutation | None) -> Mutation | None:
    """What a replica holding ``version`` lacks of ``merged`` (row granularity), or ``None``."""
    if merged is None:
        return None
    have = canonical_partition(version)
    if have is None:
        return merged
    if have == merged:
        return None
    deletion = merged.partition_deletion
    static_row = merged.static_row
    their_rows = {row.clustering: row for row in have.rows}
    their_tombstones = set(have.range_tombstones)
    diff = Mutation(
        merged.keyspace,
        merged.table,
        merged.partition_key,
        None if deletion == have.partition_deletion else deletion,
        None if static_row == have.static_row else static_row,
        tuple(row for row in merged.rows if their_rows.get(row.clustering) != row),
        tuple(rt for rt in merged.range_tombstones if rt not in their_tombstones),
    )
    return None if diff.is_empty else diff


def repair_mutations(
    merged: Mutation | None, versions: Mapping[Host, Mutation | None]
) -> dict[Host, Mutation]:
    """The repair of every replica that lacks something, in ``versions`` order."""
    repairs: dict[Host, Mutation] = {}
    for host, version in versions.items():
        repair = repair_mutation(merged, version)
        if repair is not None:
            repairs[host] = repair
    return repairs


@final
class BlockingRepair:
    """The repair writes of one read, and the acks the client waits for (module rules).

    ``participants`` are the replicas whose data was reconciled; ``repairs`` those of them that
    lack something, with what they lack.
    """

    __slots__ = (
        "_acked",
        "_failed",
        "_local_dc",
        "_local_only",
        "block_for",
        "participants",
        "repairs",
        "request_id",
    )

    def __init__(
        self,
        request_id: int,
        consistency: ConsistencyLevel,
        strategy: ReplicationStrategy,
        local_dc: str,
        participants: Sequence[Host],
        repairs: Mapping[Host, Mutation],
    ) -> None:
        if not set(repairs) <= set(participants):
            raise InvalidRequest("repairs for hosts that did not take part in the read")
        self.request_id = request_id
        self.participants = tuple(participants)
        self.repairs = dict(repairs)
        self._local_dc = local_dc
        self._local_only = consistency in DATACENTER_LOCAL
        required = block_for_write(consistency, strategy, local_dc)
        in_sync = sum(1 for h in participants if h not in repairs and self.blocks_on(h))
        self.block_for = max(0, required - in_sync)
        counted = sum(1 for host in repairs if self.blocks_on(host))
        invariant(
            self.block_for <= counted,
            f"read {request_id}: repair waits for {self.block_for} acks but only {counted} "
            f"counted repairs go out ({len(self.participants)} participants, {required} needed)",
        )
        self._acked: set[Host] = set()
        self._failed: set[Host] = set()

    def blocks_on(self, host: Host) -> bool:
        """Whether an ack from ``host`` counts (local DC only for LOCAL_* levels)."""
        return not self._local_only or host.dc == self._local_dc

    def start(self) -> list[SendRepair]:
        return [
            SendRepair(host, self.request_id, self.repairs[host])
            for host in self.participants
            if host in self.repairs
        ]

    @property
    def received(self) -> int:
        """Counted repair acks so far."""
        return sum(1 for host in self._acked if self.blocks_on(host))

    @property
    def is_complete(self) -> bool:
        return self.received >= self.block_for

    def on_ack(self, host: Host) -> bool:
        """``host`` applied its repair; True if the ack was new and expected."""
        if host not in self.repairs or host in self._acked or host in self._failed:
            return False
        self._acked.add(host)
        return True

    def on_failure(self, host: Host) -> bool:
        """``host`` failed to apply its repair; True if the failure was new and expected."""
        if host not in self.repairs or host in self._acked or host in self._failed:
            return False
        self._failed.add(host)
        return True

    def validate(self) -> None:
        invariant(not self._acked & self._failed, "a repair both acked and failed")
        invariant(self._acked | self._failed <= set(self.repairs), "answer for no repair sent")
        invariant(set(self.repairs) <= set(self.participants), "repair of a non-participant")
        invariant(self.block_for >= 0, "negative repair blockFor")
