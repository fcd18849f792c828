"""Consistency levels: how many replicas must answer, the live-replica check, response counting.

Owns ``shared/reference/cassandra-core.md`` §5.1 (codes and blockFor, C41
``db/ConsistencyLevel.java``) and §5.2 (Unavailable before sending, timeouts after, C41
``locator/ReplicaPlans.java``), seed 003 "Tunable Consistency".

Rules:

* ``ConsistencyLevel`` is the native protocol's [consistency] enum (``ringflow.errors.Consistency``,
  one noun for one concept, re-exported by ``ringflow.cql``); ``WriteType`` likewise. The errors
  (``Unavailable``, ``ReadTimeout``, ``WriteTimeout``) are ``ringflow.errors`` types, answered by
  type by the CQL layer.
* QUORUM sums the replication factors first and then takes the quorum:
  ``floor(sum RF / 2) + 1``, never a sum of per-DC quorums. LOCAL_QUORUM is the local DC's
  quorum under NetworkTopologyStrategy and plain QUORUM under any other strategy; EACH_QUORUM is
  the sum of every DC's quorum under NTS (each DC must meet its own), QUORUM otherwise. ALL is
  the sum of the RFs. Counts use all replicas, transient ones included, as Cassandra does.
* Writes also wait for pending replicas (ranges moving to a joining node): LOCAL_* count only
  the local DC's pending replicas, EACH_QUORUM counts them per DC, ANY counts none.
* Before sending, too few live replicas is ``Unavailable`` (0x1000): LOCAL_* count the local
  DC, EACH_QUORUM checks every DC ("... in DC x"), ANY always passes (a hint will do).
* After sending, the coordinator's ``ResponseTracker`` counts answers only from the replicas
  the level waits for (local DC for LOCAL_*, per DC for EACH_QUORUM) and fails as soon as
  enough replicas failed that the level can no longer be met.
* A replication argument is either a ``ReplicationStrategy`` or a plain ``{dc: rf}`` map,
  which is read as NetworkTopologyStrategy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, final

from ringflow.errors import (
    Consistency,
    InternalError,
    InvalidRequest,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
    WriteType,
    invariant,
)
from ringflow.ring import (
    Host,
    NetworkTopologyStrategy,
    ReplicationFactor,
    ReplicationStrategy,
)

ConsistencyLevel = Consistency
"""The native protocol's consistency levels (ANY 0 ... LOCAL_ONE 10)."""

Replication = ReplicationStrategy | Mapping[str, int | str | ReplicationFactor]
"""A keyspace's strategy, or ``{dc: rf}`` read as NetworkTopologyStrategy."""

DATACENTER_LOCAL: Final = frozenset(
    {Consistency.LOCAL_ONE, Consistency.LOCAL_QUORUM, Consistency.LOCAL_SERIAL}
)
SERIAL_LEVELS: Final = frozenset({Consistency.SERIAL, Consistency.LOCAL_SERIAL})


# -- validation ----------------------------------------------------------------------------


def _check_level(consistency: object) -> Consistency:
    if not isinstance(consistency, Consistency):
        raise InvalidRequest(f"not a consistency level: {consistency!r}")
    return consistency


def validate_for_read(consistency: Consistency) -> None:
    """Reads accept every level but ANY."""
    if _check_level(consistency) is Consistency.ANY:
        raise InvalidRequest("ANY ConsistencyLevel is only supported for writes")


def validate_for_write(consistency: Consistency) -> None:
    """Plain writes accept every level but the serial ones (those are for conditional updates)."""
    if _check_level(consistency) in SERIAL_LEVELS:
        raise InvalidRequest("You must use conditional updates for serializable writes")


# -- blockFor ------------------------------------------------------------------------------


def _strategy(replication: Replication) -> ReplicationStrategy:
    if isinstance(replication, ReplicationStrategy):
        return replication
    if isinstance(replication, Mapping):
        return NetworkTopologyStrategy.of(replication)
    raise InvalidRequest(f"replication must be a strategy or a {{dc: rf}} map: {replication!r}")


def quorum_for(replica_count: int) -> int:
    """``floor(n / 2) + 1``."""
    return replica_count // 2 + 1


def local_quorum_for(replication: Replication, datacenter: str) -> int:
    """Quorum of ``datacenter`` under NTS (a DC not listed has RF 0: quorum 1); else QUORUM."""
    strategy = _strategy(replication)
    if isinstance(strategy, NetworkTopologyStrategy):
        factor = strategy.factor_of(datacenter)
        return quorum_for(0 if factor is None else factor.all_replicas)
    return quorum_for(strategy.total_replication_factor.all_replicas)


def _datacenters(strategy: NetworkTopologyStrategy) -> list[str]:
    return [dc for dc, _ in strategy.factors_by_dc]


def block_for(consistency: Consistency, replication: Replication, local_dc: str) -> int:
    """Replies needed for ``consistency`` (reads; writes use ``block_for_write``)."""
    strategy = _strategy(replication)
    level = _check_level(consistency)
    total = strategy.total_replication_factor.all_replicas
    if level in (Consistency.ANY, Consistency.ONE, Consistency.LOCAL_ONE):
        return 1
    if level is Consistency.TWO:
        return 2
    if level is Consistency.THREE:
        return 3
    if level in (Consistency.QUORUM, Consistency.SERIAL):
        return quorum_for(total)
    if level is Consistency.ALL:
        return total
    if level in (Consistency.LOCAL_QUORUM, Consistency.LOCAL_SERIAL):
        return local_quorum_for(strategy, local_dc)
    invariant(level is Consistency.EACH_QUORUM, f"unhandled consistency level {level!r}")
    if isinstance(strategy, NetworkTopologyStrategy):
        return sum(local_quorum_for(strategy, dc) for dc in _datacenters(strategy))
    return quorum_for(total)


def each_quorum_block_for(replication: Replication, pending: Sequence[Host] = ()) -> dict[str, int]:
    """EACH_QUORUM per DC: the DC's quorum plus its pending replicas (``eachQuorumForWrite``).

    Under a non-NTS strategy there are no DCs to speak of: the result is ``{}``.
    """
    strategy = _strategy(replication)
    if not isinstance(strategy, NetworkTopologyStrategy):
        return {}
    required = {dc: local_quorum_for(strategy, dc) for dc in _datacenters(strategy)}
    for host in pending:
        if host.dc in required:
            required[host.dc] += 1
    return required


def block_for_write(
    consistency: Consistency,
    replication: Replication,
    local_dc: str,
    pending: Sequence[Host] = (),
) -> int:
    """``block_for`` plus pending replicas: local-DC ones for LOCAL_*, none for ANY."""
    required = block_for(consistency, replication, local_dc)
    if consistency is Consistency.ANY:
        return required
    if consistency in DATACENTER_LOCAL:
        return required + sum(1 for host in pending if host.dc == local_dc)
    return required + len(pending)


# -- the live-replica check ----------------------------------------------------------------


def _count_by_dc(hosts: Sequence[Host]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for host in hosts:
        counts[host.dc] = counts.get(host.dc, 0) + 1
    return counts


def _unique_plan(replicas: Sequence[Host], pending: Sequence[Host]) -> list[Host]:
    plan = [*replicas, *pending]
    if len(set(plan)) != len(plan):
        raise InvalidRequest(f"a host is listed twice among replicas and pending: {plan}")
    return plan


def assure_sufficient_live_replicas(
    consistency: Consistency,
    replication: Replication,
    replicas: Sequence[Host],
    live: Callable[[Host], bool],
    *,
    local_dc: str,
    for_write: bool,
    pending: Sequence[Host] = (),
) -> list[Host]:
    """Raise ``Unavailable`` unless enough replicas are alive; return the live ones.

    ``replicas`` are the natural replicas, ``pending`` the replicas gaining the range (writes
    only; a read ignores them). Both may include dead hosts: ``live`` decides.
    """
    if for_write:
        validate_for_write(consistency)
        candidates = _unique_plan(replicas, pending)
        required = block_for_write(consistency, replication, local_dc, pending)
    else:
        validate_for_read(consistency)
        candidates = _unique_plan(replicas, ())
        required = block_for(consistency, replication, local_dc)
    alive = [host for host in candidates if live(host)]
    if consistency is Consistency.ANY:
        return alive
    if consistency in DATACENTER_LOCAL:
        local_alive = sum(1 for host in alive if host.dc == local_dc)
        if local_alive < required:
            reported = 1 if consistency is Consistency.LOCAL_ONE else required
            raise Unavailable(consistency, reported, local_alive)
        return alive
    strategy = _strategy(replication)
    if consistency is Consistency.EACH_QUORUM and isinstance(strategy, NetworkTopologyStrategy):
        alive_by_dc = _count_by_dc(alive)
        for dc in _datacenters(strategy):
            dc_required = local_quorum_for(strategy, dc)
            if alive_by_dc.get(dc, 0) < dc_required:
                raise Unavailable(consistency, dc_required, alive_by_dc.get(dc, 0), datacenter=dc)
        return alive
    if len(alive) < required:
        raise Unavailable(consistency, required, len(alive))
    return alive


# -- counting responses --------------------------------------------------------------------


@final
class ResponseTracker:
    """The coordinator's bookkeeping for one request: who answered, who failed, are we done.

    Built from the replica plan (the hosts contacted) and the level; the counting groups are
    fixed at construction: one group of every contacted host, or the local DC's hosts for
    LOCAL_*, or one group per DC for EACH_QUORUM under NTS. Each group needs its own count.
    Duplicate answers count once; answers from hosts outside every group are ignored.
    """

    __slots__ = (
        "_failed",
        "_group_of",
        "_hint_stored",
        "_members",
        "_required",
        "_responded",
        "consistency",
        "for_write",
    )

    def __init__(
        self,
        consistency: Consistency,
        replication: Replication,
        replicas: Sequence[Host],
        *,
        local_dc: str,
        for_write: bool,
        pending: Sequence[Host] = (),
    ) -> None:
        if for_write:
            validate_for_write(consistency)
        else:
            validate_for_read(consistency)
        plan = _unique_plan(replicas, pending if for_write else ())
        effective_pending = pending if for_write else ()
        self.consistency = consistency
        self.for_write = for_write
        self._required: dict[str, int] = {}
        self._members: dict[str, set[Host]] = {}
        self._group_of: dict[Host, str] = {}
        strategy = _strategy(replication)
        if consistency is Consistency.EACH_QUORUM and isinstance(strategy, NetworkTopologyStrategy):
            self._required = each_quorum_block_for(strategy, effective_pending)
            for host in plan:
                if host.dc in self._required:
                    self._group_of[host] = host.dc
        else:
            group = local_dc if consistency in DATACENTER_LOCAL else "*"
            self._required[group] = block_for_write(
                consistency, strategy, local_dc, effective_pending
            )
            for host in plan:
                if group == "*" or host.dc == local_dc:
                    self._group_of[host] = group
        for name in self._required:
            self._members[name] = {h for h, g in self._group_of.items() if g == name}
        self._responded: set[Host] = set()
        self._failed: set[Host] = set()
        self._hint_stored = False

    @property
    def block_for(self) -> int:
        return sum(self._required.values())

    @property
    def received(self) -> int:
        """Answers that count toward the level (for the timeout error's ``received``)."""
        hint = 1 if self.consistency is Consistency.ANY and self._hint_stored else 0
        return len(self._responded) + hint

    def required_by_group(self) -> dict[str, int]:
        """Replies needed per counting group: a DC name, or ``"*"`` for the whole plan."""
        return dict(self._required)

    def _count(self, group: str) -> int:
        return sum(1 for host in self._responded if self._group_of[host] == group)

    def on_response(self, host: Host) -> bool:
        """``host`` answered successfully; True if the answer counts toward the level."""
        if host not in self._group_of or host in self._failed:
            return False
        if host in self._responded:
            return False
        self._responded.add(host)
        return True

    def on_failure(self, host: Host) -> bool:
        """``host`` failed (error reply, or the messaging layer gave up); True if it counts."""
        if host not in self._group_of or host in self._responded or host in self._failed:
            return False
        self._failed.add(host)
        return True

    def on_hint_stored(self) -> None:
        """The coordinator stored a hint; that alone satisfies ANY (and nothing else)."""
        self._hint_stored = True

    @property
    def is_satisfied(self) -> bool:
        if self.consistency is Consistency.ANY and self._hint_stored:
            return True
        return all(self._count(name) >= need for name, need in self._required.items())

    @property
    def is_failed(self) -> bool:
        """Too many failures: some group can no longer reach its count."""
        if self.is_satisfied:
            return False
        if self.consistency is Consistency.ANY:
            # A hint can always still be written.
            return False
        for name, need in self._required.items():
            members = self._members[name]
            if len(members) - len(members & self._failed) < need:
                return True
        return False

    def write_timeout(self, write_type: WriteType) -> WriteTimeout:
        return WriteTimeout(self.consistency, self.received, self.block_for, write_type)

    def read_timeout(self, data_present: bool) -> ReadTimeout:
        return ReadTimeout(self.consistency, self.received, self.block_for, data_present)

    def validate(self) -> None:
        invariant(not self._responded & self._failed, "a host both answered and failed")
        invariant(
            self._responded | self._failed <= self._group_of.keys(),
            "an answer was recorded from a host the level does not wait for",
        )
        invariant(self._required.keys() == self._members.keys(), "groups without members map")
        for name, members in self._members.items():
            if not all(self._group_of[host] == name for host in members):
                raise InternalError(f"group {name} lists a host of another group")
