"""The python driver's token map as an offline replica oracle (cassandra-core.md §12 item 3).

``scylla-driver`` 3.29.12: ``cassandra.pool.Host(endpoint, SimpleConvictionPolicy, datacenter=,
rack=, host_id=)``, ``Metadata.rebuild_token_map`` with the Murmur3 partitioner, a
``KeyspaceMetadata`` per replication map, ``TokenMap.get_replicas(ks, Murmur3Token(t))``.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cassandra.metadata import KeyspaceMetadata, Metadata, Murmur3Token
from cassandra.policies import SimpleConvictionPolicy
from cassandra.pool import Host as DriverHost

from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host, TokenMetadata

PARTITIONER = "org.apache.cassandra.dht.Murmur3Partitioner"
_keyspace_numbers = itertools.count()


class DriverRing:
    """The driver's view of one of our rings."""

    def __init__(self, tokens_by_host: Mapping[Host, Sequence[int]]) -> None:
        self.metadata = Metadata()
        self._ours_by_endpoint: dict[str, Host] = {}
        driver_tokens = {}
        for host, tokens in tokens_by_host.items():
            driver_host = DriverHost(
                host.endpoint,
                SimpleConvictionPolicy,
                datacenter=host.dc,
                rack=host.rack,
                host_id=host.host_id,
            )
            self._ours_by_endpoint[host.endpoint] = host
            driver_tokens[driver_host] = [str(token) for token in tokens]
        self.metadata.rebuild_token_map(PARTITIONER, driver_tokens)

    def keyspace(self, strategy_class: str, options: Mapping[str, str]) -> str:
        name = f"ks{next(_keyspace_numbers)}"
        self.metadata.keyspaces[name] = KeyspaceMetadata(name, True, strategy_class, dict(options))
        return name

    def replicas(self, keyspace: str, token: int) -> list[Host]:
        found = self.metadata.token_map.get_replicas(keyspace, Murmur3Token(token))
        return [self._ours_by_endpoint[str(host.endpoint.address)] for host in found]


@dataclass(frozen=True, slots=True)
class RandomRing:
    """A random topology: hosts with tokens, and an RF per DC."""

    tokens_by_host: dict[Host, list[int]]
    factors_by_dc: dict[str, int]
    racks_by_dc: dict[str, int]
    vnodes: int

    def token_metadata(self) -> TokenMetadata:
        return TokenMetadata(self.tokens_by_host)

    def driver_trusted_for_nts(self) -> bool:
        """§3.4: the driver's NTS is wrong for vnodes and 1 < racks < RF in some DC."""
        if self.vnodes == 1:
            return True
        return all(
            not 1 < self.racks_by_dc[dc] < factor for dc, factor in self.factors_by_dc.items()
        )


def random_ring(rng: random.Random, max_nodes_per_dc: int = 6) -> RandomRing:
    """1-3 DCs, 1-4 racks each, 1-256 vnodes, RF 1-5 per DC; distinct random tokens."""
    vnodes = rng.choice([1, 1, 2, 3, 4, 8, 16, 64, 256])
    dc_count = rng.randint(1, 3)
    hosts: list[Host] = []
    racks_by_dc: dict[str, int] = {}
    for dc_number in range(1, dc_count + 1):
        dc = f"dc{dc_number}"
        node_count = rng.randint(1, max_nodes_per_dc)
        rack_names = [f"rack{n}" for n in range(1, rng.randint(1, 4) + 1)]
        racks = [rng.choice(rack_names) for _ in range(node_count)]
        racks_by_dc[dc] = len(set(racks))
        for rack in racks:
            number = len(hosts) + 1
            endpoint = f"127.0.{number // 250}.{number % 250 + 1}"
            hosts.append(Host(uuid.UUID(int=rng.getrandbits(128)), endpoint, dc, rack))
    taken: set[int] = set()
    tokens_by_host: dict[Host, list[int]] = {}
    for host in hosts:
        tokens: list[int] = []
        while len(tokens) < vnodes:
            token = rng.randint(MIN_TOKEN + 1, MAX_TOKEN)
            if token not in taken:
                taken.add(token)
                tokens.append(token)
        tokens_by_host[host] = tokens
    factors = {dc: rng.randint(1, 5) for dc in racks_by_dc}
    return RandomRing(tokens_by_host, factors, racks_by_dc, vnodes)


def probe_tokens(rng: random.Random, ring_tokens: Sequence[int], count: int = 60) -> list[int]:
    """Random tokens, node tokens and their neighbours, and tokens past both ring ends."""
    probes = [rng.randint(MIN_TOKEN + 1, MAX_TOKEN) for _ in range(count)]
    for token in rng.sample(list(ring_tokens), min(count, len(ring_tokens))):
        probes.extend(t for t in (token - 1, token, token + 1) if MIN_TOKEN < t <= MAX_TOKEN)
    highest, lowest = max(ring_tokens), min(ring_tokens)
    probes.extend([MIN_TOKEN + 1, MAX_TOKEN, lowest - 1 if lowest > MIN_TOKEN + 1 else lowest])
    if highest < MAX_TOKEN:
        probes.extend([highest + 1, rng.randint(highest + 1, MAX_TOKEN)])
    return probes
