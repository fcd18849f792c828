"""The balanced allocator's ring model (cassandra-core.md §4.2, ``_allocation_model``).

Proves: the incremental ownership update after each insert equals a full recomputation, and the
model's replicated ownership is what NetworkTopologyStrategy actually gives (racks as groups
when racks outnumber the RF, nodes as groups in a one-rack DC), so optimising the model
optimises the real placement.
"""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    ReplicaMap,
    TokenMetadata,
    replication_strategy,
)
from ringflow.ring._allocation_model import AllocationRing


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    replicas=st.integers(1, 4),
    groups=st.integers(1, 6),
    initial=st.integers(1, 30),
    inserts=st.integers(1, 20),
)
def test_incremental_ownership_equals_recomputation(
    seed: int, replicas: int, groups: int, initial: int, inserts: int
) -> None:
    rng = random.Random(seed)
    tokens = {rng.randint(MIN_TOKEN + 1, MAX_TOKEN) for _ in range(initial + inserts)}
    ordered = list(tokens)
    entries = [(t, rng.randrange(groups * 2), 0) for t in ordered[:initial]]
    entries = [(t, unit, unit % groups) for t, unit, _ in entries]
    ring = AllocationRing(entries, replicas)
    for token in ordered[initial:]:
        unit = rng.randrange(groups * 2)
        before_tokens = list(ring.token_ownership)
        before_units = dict(ring.unit_ownership)
        token_delta, unit_delta = ring.ownership_delta(token, unit, unit % groups)
        ring.insert(token, unit, unit % groups)
        slot = ring.tokens.index(token)
        assert ring.token_ownership[slot] == pytest.approx(token_delta.get(-1, 0.0), abs=1e-12)
        for index, delta in token_delta.items():
            if index >= 0:
                new_index = index if index < slot else index + 1
                assert ring.token_ownership[new_index] == pytest.approx(
                    before_tokens[index] + delta, abs=1e-12
                )
        for owner, delta in unit_delta.items():
            expected = before_units.get(owner, 0.0) + delta
            assert ring.unit_ownership[owner] == pytest.approx(expected, abs=1e-12)
        ring.validate()
    assert sum(ring.token_ownership) == pytest.approx(min(replicas, len(set(ring.groups))))


@pytest.mark.parametrize(("racks", "factor"), [(1, 3), (4, 3), (5, 2), (1, 1)])
def test_model_ownership_is_the_real_nts_ownership(racks: int, factor: int) -> None:
    rng = random.Random(racks * 10 + factor)
    hosts = [
        Host(uuid.UUID(int=n + 1), f"10.0.0.{n + 1}", "dc1", f"rack{n % racks}") for n in range(9)
    ]
    tokens = {h: [rng.randint(MIN_TOKEN + 1, MAX_TOKEN) for _ in range(5)] for h in hosts}
    metadata = TokenMetadata(tokens)
    group_of = {h: (h.rack if racks > factor else h) for h in hosts}
    entries = [(t, h, group_of[h]) for h in hosts for t in tokens[h]]
    model = AllocationRing(entries, factor)
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": str(factor)})
    real = ReplicaMap(strategy, metadata).effective_ownership()
    for host in hosts:
        assert model.unit_ownership[host] == pytest.approx(real[metadata.host_index(host)])
