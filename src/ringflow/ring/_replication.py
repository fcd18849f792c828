"""Replication factors and strategies: which hosts hold the replicas of a token, in order.

Reference: ``shared/reference/cassandra-core.md`` §3.1 (SimpleStrategy), §3.2
(NetworkTopologyStrategy), §3.3 (transient ``"N/T"`` notation). Rules:

* a replication map is CQL's ``{'class': ..., ...}``; the class is ``SimpleStrategy`` or
  ``NetworkTopologyStrategy``, bare or as ``org.apache.cassandra.locator.<name>``;
* ``"N"`` is N full replicas; ``"N/T"`` is N replicas of which the last T are transient
  (``T == 0 or T < N``). A bad factor is a :class:`RingError` naming the value and the rule;
* SimpleStrategy walks the ring clockwise from the token's first ring token, taking each new host
  until it has N; NetworkTopologyStrategy does one walk that fills every DC at once, preferring
  new racks and allowing ``N - racks`` rack repeats taken as they are met (§3.2). Replicas come
  back in Cassandra's order, the primary first, interleaved across DCs;
* a NetworkTopologyStrategy DC set to ``'0'`` holds no replicas, as in Cassandra (where ALTER
  drops such DCs); a DC listed but absent from the ring holds none either.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ringflow.ring._errors import RingError
from ringflow.ring._token_metadata import Host, TokenMetadata

_JAVA_PACKAGE = "org.apache.cassandra.locator."
_FACTOR_PATTERN = re.compile(r"\+?(\d+)(?:/\+?(\d+))?")
_FACTOR_RULE = "expected '<replicas>' or '<replicas>/<transient>' with replicas >= 1"


@dataclass(frozen=True, slots=True)
class ReplicationFactor:
    """``all_replicas`` copies, the last ``transient_replicas`` of them transient."""

    all_replicas: int
    transient_replicas: int = 0

    def __post_init__(self) -> None:
        for name in ("all_replicas", "transient_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise RingError(f"replication factor {name} must be an int, got {value!r}")
        if self.all_replicas < 1:
            raise RingError(f"replication factor {self.all_replicas} must be at least 1")
        if self.transient_replicas < 0:
            raise RingError(f"transient replicas {self.transient_replicas} must not be negative")
        if self.transient_replicas and self.transient_replicas >= self.all_replicas:
            raise RingError(
                f"replication factor {self}: transient replicas ({self.transient_replicas}) must "
                f"be fewer than all replicas ({self.all_replicas})"
            )

    @property
    def full_replicas(self) -> int:
        return self.all_replicas - self.transient_replicas

    @property
    def is_transient(self) -> bool:
        return self.transient_replicas > 0

    @classmethod
    def parse(cls, value: str | int) -> ReplicationFactor:
        """Parse ``3``, ``'3'`` or ``'3/1'`` (Cassandra ``ReplicationFactor.fromString``)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if not isinstance(value, str):
            raise RingError(f"replication factor must be a string or int, got {value!r}")
        match = _FACTOR_PATTERN.fullmatch(value)
        if match is None:
            raise RingError(f"replication factor {value!r} is not valid: {_FACTOR_RULE}")
        all_replicas = int(match.group(1))
        transient = int(match.group(2)) if match.group(2) is not None else 0
        if all_replicas < 1:
            raise RingError(f"replication factor {value!r} is not valid: {_FACTOR_RULE}")
        return cls(all_replicas, transient)

    def __str__(self) -> str:
        """The parseable form: ``'3'`` or ``'3/1'`` (``toParseableString``)."""
        if self.transient_replicas:
            return f"{self.all_replicas}/{self.transient_replicas}"
        return str(self.all_replicas)


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica of a token: the host, and whether it holds a full copy (else transient)."""

    host: Host
    is_full: bool

    def __iter__(self) -> Iterator[Host | bool]:
        """Unpack as ``(host, is_full)``."""
        return iter((self.host, self.is_full))


class RingView:
    """What a strategy's walk needs from a ring (cheap: TokenMetadata keeps the parts)."""

    __slots__ = ("node_count_by_dc", "owners", "rack_count_by_dc", "token_metadata")

    def __init__(self, token_metadata: TokenMetadata) -> None:
        self.token_metadata = token_metadata
        self.owners = token_metadata.owner_hosts
        datacenters = token_metadata.datacenters()
        self.node_count_by_dc = {dc: len(hosts) for dc, hosts in datacenters.items()}
        self.rack_count_by_dc = {dc: len(token_metadata.racks_of(dc)) for dc in datacenters}


class ReplicationStrategy(ABC):
    """A keyspace's placement rule: token -> ordered replicas."""

    __slots__ = ()

    @property
    @abstractmethod
    def class_name(self) -> str:
        """The short Cassandra class name, e.g. ``'SimpleStrategy'``."""

    @property
    @abstractmethod
    def total_replication_factor(self) -> ReplicationFactor:
        """Replicas per token over all DCs (full and transient)."""

    @abstractmethod
    def options(self) -> dict[str, str]:
        """The replication map, as CQL's ``DESCRIBE`` would print it."""

    @abstractmethod
    def walk_from(self, start_index: int, view: RingView) -> list[Replica]:
        """Replicas of the range ending at ring index ``start_index``."""

    def replica_plan(self, token: int, token_metadata: TokenMetadata) -> list[Replica]:
        """Replicas of ``token`` with their full/transient flags, primary first."""
        start_index = token_metadata.first_token_index(token)
        return self.walk_from(start_index, RingView(token_metadata))

    def replicas(self, token: int, token_metadata: TokenMetadata) -> list[Host]:
        """Replicas of ``token``, primary first, in Cassandra's order."""
        return [replica.host for replica in self.replica_plan(token, token_metadata)]

    def ring_replica_plans(self, token_metadata: TokenMetadata) -> list[list[Replica]]:
        """Replica plan of every ring position (the range ending at each ring token)."""
        if len(token_metadata) == 0:
            raise RingError("the ring is empty: no host owns any token")
        view = RingView(token_metadata)
        return [self.walk_from(index, view) for index in range(len(token_metadata))]


@dataclass(frozen=True, slots=True)
class SimpleStrategy(ReplicationStrategy):
    """Ring walk taking each new host, ignoring DCs and racks (§3.1)."""

    replication_factor: ReplicationFactor

    @property
    def class_name(self) -> str:
        return "SimpleStrategy"

    @property
    def total_replication_factor(self) -> ReplicationFactor:
        return self.replication_factor

    def options(self) -> dict[str, str]:
        return {"class": _JAVA_PACKAGE + self.class_name, "replication_factor": self._factor()}

    def _factor(self) -> str:
        return str(self.replication_factor)

    def walk_from(self, start_index: int, view: RingView) -> list[Replica]:
        factor = self.replication_factor
        owners = view.owners
        size = len(owners)
        plan: list[Replica] = []
        chosen: set[Host] = set()
        for step in range(size):
            host = owners[(start_index + step) % size]
            if host in chosen:
                continue
            chosen.add(host)
            plan.append(Replica(host, len(plan) < factor.full_replicas))
            if len(plan) == factor.all_replicas:
                break
        return plan


class _DatacenterFill:
    """Per-DC state of the NetworkTopologyStrategy walk (Cassandra's DatacenterEndpoints)."""

    __slots__ = ("rack_repeats_left", "replicas_left", "transients")

    def __init__(self, factor: ReplicationFactor, node_count: int, rack_count: int) -> None:
        # Fewer nodes than the RF: the node count is the effective RF.
        self.replicas_left = min(factor.all_replicas, node_count)
        # Every rack gets a replica; the RF beyond the rack count goes to the first repeats met.
        self.rack_repeats_left = factor.all_replicas - rack_count
        self.transients = max(
            factor.transient_replicas - (factor.all_replicas - self.replicas_left), 0
        )


@dataclass(frozen=True, slots=True)
class NetworkTopologyStrategy(ReplicationStrategy):
    """Per-DC replication factors, rack-aware, one walk for all DCs (§3.2)."""

    factors_by_dc: tuple[tuple[str, ReplicationFactor], ...]

    def __post_init__(self) -> None:
        names = [dc for dc, _ in self.factors_by_dc]
        if len(set(names)) != len(names):
            raise RingError(f"NetworkTopologyStrategy lists a datacenter twice: {names}")
        if not names:
            raise RingError("NetworkTopologyStrategy needs a replication factor for some DC")

    @classmethod
    def of(cls, factors: Mapping[str, ReplicationFactor | int | str]) -> NetworkTopologyStrategy:
        """Build from ``{'dc1': 3, 'dc2': '2/1'}``."""
        return cls(
            tuple(
                (dc, f if isinstance(f, ReplicationFactor) else ReplicationFactor.parse(f))
                for dc, f in factors.items()
            )
        )

    @property
    def class_name(self) -> str:
        return "NetworkTopologyStrategy"

    def factor_of(self, dc: str) -> ReplicationFactor | None:
        return dict(self.factors_by_dc).get(dc)

    @property
    def total_replication_factor(self) -> ReplicationFactor:
        return ReplicationFactor(
            sum(f.all_replicas for _, f in self.factors_by_dc),
            sum(f.transient_replicas for _, f in self.factors_by_dc),
        )

    def options(self) -> dict[str, str]:
        options = {"class": _JAVA_PACKAGE + self.class_name}
        options.update({dc: str(factor) for dc, factor in self.factors_by_dc})
        return options

    def _fills(self, view: RingView) -> dict[str, _DatacenterFill]:
        fills = {}
        for dc, factor in self.factors_by_dc:
            node_count = view.node_count_by_dc.get(dc, 0)
            if node_count:
                fills[dc] = _DatacenterFill(factor, node_count, view.rack_count_by_dc[dc])
        return fills

    def walk_from(self, start_index: int, view: RingView) -> list[Replica]:
        fills = self._fills(view)
        unfilled = len(fills)
        owners = view.owners
        size = len(owners)
        seen_racks: set[tuple[str, str]] = set()
        chosen: set[Host] = set()
        plan: list[Replica] = []
        for step in range(size):
            if unfilled == 0:
                break
            host = owners[(start_index + step) % size]
            fill = fills.get(host.dc)
            if fill is None or fill.replicas_left == 0 or host in chosen:
                continue
            is_full = fill.replicas_left > fill.transients
            location = (host.dc, host.rack)
            if location in seen_racks:
                if fill.rack_repeats_left <= 0:
                    continue
                fill.rack_repeats_left -= 1
            else:
                seen_racks.add(location)
            chosen.add(host)
            plan.append(Replica(host, is_full))
            fill.replicas_left -= 1
            if fill.replicas_left == 0:
                unfilled -= 1
        return plan


def _class_name(options: Mapping[str, object]) -> str:
    name = options.get("class")
    if not isinstance(name, str) or not name:
        raise RingError(f"a replication map needs a 'class' naming the strategy, got {name!r}")
    short = name.removeprefix(_JAVA_PACKAGE)
    if short not in ("SimpleStrategy", "NetworkTopologyStrategy"):
        raise RingError(
            f"unknown replication strategy class {name!r}: expected SimpleStrategy or "
            f"NetworkTopologyStrategy (optionally prefixed with {_JAVA_PACKAGE!r})"
        )
    return short


def _simple_strategy(options: dict[str, object]) -> SimpleStrategy:
    if "replication_factor" not in options:
        raise RingError("SimpleStrategy requires the option 'replication_factor'")
    factor = options.pop("replication_factor")
    if options:
        raise RingError(f"unrecognized SimpleStrategy options {sorted(options)}")
    return SimpleStrategy(_parse_factor(factor, "replication_factor"))


def _parse_factor(value: object, option: str) -> ReplicationFactor:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise RingError(f"replication option {option!r} must be a string or int, got {value!r}")
    try:
        return ReplicationFactor.parse(value)
    except RingError as error:
        raise RingError(f"replication option {option!r}: {error}") from None


def _is_zero(value: object) -> bool:
    return value in ("0", 0) and not isinstance(value, bool)


def _network_topology_strategy(
    options: dict[str, object], datacenters: Sequence[str] | None
) -> NetworkTopologyStrategy:
    default = options.pop("replication_factor", None)
    if default is not None:
        if datacenters is None:
            raise RingError(
                "NetworkTopologyStrategy 'replication_factor' expands to every datacenter: "
                "pass the cluster's datacenters"
            )
        for dc in datacenters:
            options.setdefault(dc, default)
    factors = []
    for dc, value in options.items():
        if not dc:
            raise RingError("NetworkTopologyStrategy datacenter names must not be empty")
        if not _is_zero(value):
            factors.append((dc, _parse_factor(value, dc)))
    if not factors:
        raise RingError(f"NetworkTopologyStrategy places no replica anywhere: {options}")
    return NetworkTopologyStrategy(tuple(factors))


def replication_strategy(
    options: Mapping[str, str | int], datacenters: Sequence[str] | None = None
) -> ReplicationStrategy:
    """The strategy of a CQL replication map, e.g. ``{'class': 'SimpleStrategy',
    'replication_factor': '3'}`` or ``{'class': 'NetworkTopologyStrategy', 'dc1': '3'}``.

    ``datacenters`` lets NetworkTopologyStrategy's ``'replication_factor'`` shorthand expand to
    every DC not listed explicitly (CASSANDRA-14303).
    """
    if not isinstance(options, Mapping):
        raise RingError(f"a replication map must be a mapping, got {options!r}")
    remaining: dict[str, object] = dict(options)
    short = _class_name(remaining)
    del remaining["class"]
    if short == "SimpleStrategy":
        return _simple_strategy(remaining)
    return _network_topology_strategy(remaining, datacenters)
