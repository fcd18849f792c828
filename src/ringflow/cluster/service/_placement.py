"""Replica placement on a node's view of the ring (cassandra-core.md §3, §8): a keyspace's
strategy, a token's replicas (pending ones during a topology change), CDC colocation, who
answers from an endpoint, and the order replicas are read in.

``ReplicaPlacement`` reads the node state's membership (the current and the future ring, the
members, the transitions), the processor's schema (the keyspaces' replication) and the
gossiper's liveness; it keeps no copy of them, so it always answers for the ring as it is. It
is the processor's ``RingView`` too (the data centers a keyspace may name, DESCRIBE CLUSTER's
range ownership).

Rules:

* ``system_distributed_everywhere`` is replicated to every ring member (Scylla's
  EverywhereStrategy); a keyspace without a definition (``system_distributed``) has
  SimpleStrategy with RF ``min(3, ring size)``.
* A write during a topology change goes to the natural replicas of the current ring and the
  pending ones (``_topology_change.pending_replicas``); a CDC stream's replicas must be its
  base's, in the current ring or in the ring being changed to (``check_colocation``).
* A joining or leaving node answers as a pending replica (``host_at``).
* Replicas are read nearest first: this node, then its DC, then the others in ring order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from ringflow.cdc import StreamId
from ringflow.cluster._coordinator import log_token
from ringflow.cluster._topology_change import colocated, pending_replicas
from ringflow.cluster._write_path import TokenReplicas
from ringflow.cluster.service._membership import Membership
from ringflow.cql import QueryProcessor
from ringflow.errors import invariant
from ringflow.ring import Host, ReplicationStrategy, TokenMetadata, replication_strategy
from ringflow.schema import Keyspace

INTERNODE_PORT = 7000
EVERYWHERE_KEYSPACE = "system_distributed_everywhere"
_STRATEGIES_KEPT = 64
"""Strategies ``strategy_of`` keeps (keyspaces x rings: the current and the future one)."""


class ReplicaPlacement:
    """Where replicas are, on the ring ``membership`` holds (module docstring)."""

    def __init__(
        self,
        host: Host,
        membership: Membership,
        processor: QueryProcessor,
        is_alive: Callable[[str], bool],
    ) -> None:
        self.host = host
        self._membership = membership
        self._processor = processor
        self._is_alive = is_alive
        self._strategies: dict[
            tuple[str, int],
            tuple[TokenMetadata, Keyspace | None, object, ReplicationStrategy],
        ] = {}
        """``strategy_of``'s answers, by keyspace and ring (at most ``_STRATEGIES_KEPT``)."""

    def live(self, host: Host) -> bool:
        return host == self.host or self._is_alive(host.endpoint)

    def host_at(self, endpoint: str) -> Host | None:
        """The host answering from ``endpoint``: a ring member, or a joining or leaving node
        (a pending replica); None for anyone else."""
        info = self._membership.members.get(endpoint)
        if info is None:  # a joining or leaving node answers as a pending replica
            transition = self._membership.transitions.get(endpoint)
            return None if transition is None else transition.host
        return info.host

    def host_of(self, host_id: uuid.UUID) -> Host | None:
        """The ring member with ``host_id``, or None."""
        for info in self._membership.members.values():
            if info.host.host_id == host_id:
                return info.host
        return None

    def strategy_of(self, keyspace: str, ring: TokenMetadata | None = None) -> ReplicationStrategy:
        """``keyspace``'s strategy on ``ring`` (default: the current ring). Kept while the
        keyspace's definition, the ring and the members are the same objects (each is
        replaced whole when it changes): a write asks two or three times."""
        membership = self._membership
        ring = membership.token_metadata if ring is None else ring
        replication = self._processor.schema.keyspaces.get(keyspace)
        members = membership.members
        key = (keyspace, id(ring))
        kept = self._strategies.get(key)
        if kept is not None and kept[0] is ring and kept[1] is replication and kept[2] is members:
            return kept[3]
        strategy = self._strategy_of(keyspace, ring, replication)
        if len(self._strategies) >= _STRATEGIES_KEPT:
            self._strategies.clear()
        self._strategies[key] = (ring, replication, members, strategy)
        return strategy

    def _strategy_of(
        self, keyspace: str, ring: TokenMetadata, replication: Keyspace | None
    ) -> ReplicationStrategy:
        if keyspace == EVERYWHERE_KEYSPACE:  # EverywhereStrategy: every ring member
            factor = max(1, len(ring.hosts))
            return replication_strategy({"class": "SimpleStrategy", "replication_factor": factor})
        if replication is None:  # system_distributed*: everywhere / local-style keyspaces
            factor = max(1, min(3, len(ring)))
            return replication_strategy({"class": "SimpleStrategy", "replication_factor": factor})
        return replication_strategy(dict(replication.replication), self.datacenters(ring))

    def range_ownership(self, keyspace: str) -> dict[str, list[str]]:
        """DESCRIBE CLUSTER's ``range_ownership`` of ``keyspace``: every range of the ring, by
        its end token, with its natural replicas in the strategy's order (Cassandra's
        ``DescribeStatement`` over ``StorageService.getRangeToAddressMap``), each endpoint as
        Cassandra prints an ``InetAddressAndPort``: ``/address:port``."""
        ring = self._membership.token_metadata
        plans = self.strategy_of(keyspace, ring).ring_replica_plans(ring)

        def shown(endpoint: str) -> str:
            return f"/{endpoint}" if ":" in endpoint else f"/{endpoint}:{INTERNODE_PORT}"

        return {
            str(token): [shown(replica.host.endpoint) for replica in plan]
            for token, plan in zip(ring.sorted_tokens, plans, strict=True)
        }

    def datacenters(self, ring: TokenMetadata | None = None) -> list[str]:
        """Every data center this node knows of: its own, its members' and the ring's (what
        ``NetworkTopologyStrategy`` options may name, and its shorthand expands to)."""
        membership = self._membership
        ring = membership.token_metadata if ring is None else ring
        members = {info.host.dc for info in list(membership.members.values())}
        return sorted({self.host.dc} | members | set(ring.datacenters()))

    def replicas_of(self, keyspace: str, token: int, *, for_write: bool = False) -> TokenReplicas:
        """The natural replicas of ``token``; for a write during a topology change also the
        pending ones (``_topology_change.pending_replicas``)."""
        membership = self._membership
        strategy = self.strategy_of(keyspace)
        pending: tuple[Host, ...] = ()
        if for_write and membership.transitions:
            future = membership.future_metadata
            pending = pending_replicas(
                token,
                membership.token_metadata,
                strategy,
                future,
                self.strategy_of(keyspace, future),
            )
        return TokenReplicas.of(token, membership.token_metadata, strategy, self.host.dc, pending)

    def check_colocation(self, keyspace: str, base: int, stream: StreamId) -> None:
        """Raise ``InternalError`` unless the CDC stream's replicas are the base's, in the
        current ring or, during a topology change, in the future ring (``_topology_change``)."""
        membership = self._membership
        log = log_token(stream)
        strategy = self.strategy_of(keyspace)
        future = membership.future_metadata if membership.transitions else None
        future_strategy = None if future is None else self.strategy_of(keyspace, future)
        invariant(
            colocated(base, log, membership.token_metadata, strategy, future, future_strategy),
            f"CDC stream {stream} (token {log}) is not colocated with base token {base}: "
            "the generation refines neither the current ring nor the ring being changed to",
        )

    def read_proximity(self, replicas: Sequence[Host]) -> list[Host]:
        """Replicas nearest first: this node when it is one (a local read costs no message,
        as Cassandra reads locally), then its DC, then the others in ring order."""
        return sorted(replicas, key=lambda host: (host != self.host, host.dc != self.host.dc))
