"""Ranks and active ranges: seed 002's worked example (three nodes, RF 3, ranges (a,b], (b,c],
(c,a]) with every node live, n3 dead, and n2 and n3 dead; and, on generated replica lists, that
every range with a live replica has exactly one active node, the first live one in rank order."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.replication import (
    RangeRanks,
    RankedRange,
    ReplicationArgumentError,
    SliceKey,
    range_of,
    rank_ranges,
)
from ringflow.ring import TokenRange

N1, N2, N3 = (uuid.UUID(int=i) for i in (1, 2, 3))
A, B, C = -100, 0, 100
AB, BC, CA = TokenRange(A, B), TokenRange(B, C), TokenRange(C, A)
# seed 002: n1 => [{(a,b]}, {(b,c]}, {(c,a]}], n2 => [{(b,c]}, {(c,a]}, {(a,b]}],
#           n3 => [{(c,a]}, {(a,b]}, {(b,c]}]
SEED_REPLICAS = {AB: (N1, N3, N2), BC: (N2, N1, N3), CA: (N3, N2, N1)}


def seed_ranks() -> RangeRanks:
    return rank_ranges([AB, BC, CA], lambda r: SEED_REPLICAS[r])


def test_seed_002_ranges_by_rank() -> None:
    ranks = seed_ranks()
    assert ranks.ranges_by_rank(N1) == ({AB}, {BC}, {CA})
    assert ranks.ranges_by_rank(N2) == ({BC}, {CA}, {AB})
    assert ranks.ranges_by_rank(N3) == ({CA}, {AB}, {BC})
    assert ranks.rank_of(CA, N1) == 2
    assert ranks.nodes() == {N1, N2, N3}


def test_seed_002_active_ranges_all_live() -> None:
    ranks = seed_ranks()
    live = {N1, N2, N3}
    assert ranks.active_ranges(N1, live) == {AB}
    assert ranks.active_ranges(N2, live) == {BC}
    assert ranks.active_ranges(N3, live) == {CA}


def test_seed_002_active_ranges_n3_dead() -> None:
    ranks = seed_ranks()
    live = {N1, N2}
    assert ranks.active_ranges(N1, live) == {AB}
    assert ranks.active_ranges(N2, live) == {BC, CA}
    assert ranks.active_ranges(N3, live) == set()


def test_seed_002_active_ranges_n2_and_n3_dead() -> None:
    ranks = seed_ranks()
    live = {N1}
    assert ranks.active_ranges(N1, live) == {AB, BC, CA}
    assert ranks.active_ranges(N2, live) == set()
    assert ranks.active_ranges(N3, live) == set()
    assert ranks.active_node(CA, set()) is None


def test_a_slice_is_ranked_by_the_range_it_was_captured_in() -> None:
    key = SliceKey("ks", "t", C, A, 60_000)
    assert range_of(key) == CA
    assert seed_ranks().replicas(range_of(key)) == (N3, N2, N1)


nodes = st.lists(st.integers(1, 8).map(lambda i: uuid.UUID(int=i)), min_size=1, max_size=5)


@given(
    st.lists(nodes.map(lambda n: tuple(dict.fromkeys(n))), min_size=1, max_size=6),
    st.sets(st.integers(1, 8).map(lambda i: uuid.UUID(int=i))),
)
def test_each_range_with_a_live_replica_has_one_active_node_the_first_live(
    replica_lists: list[tuple[uuid.UUID, ...]], live: set[uuid.UUID]
) -> None:
    ranges = [TokenRange(i * 10, i * 10 + 5) for i in range(len(replica_lists))]
    ranks = rank_ranges(ranges, dict(zip(ranges, replica_lists, strict=True)).__getitem__)
    everyone = {node for replicas in replica_lists for node in replicas}
    for token_range, replicas in zip(ranges, replica_lists, strict=True):
        holders = [node for node in everyone if token_range in ranks.active_ranges(node, live)]
        live_replicas = [node for node in replicas if node in live]
        assert holders == live_replicas[:1]
        for rank, node in enumerate(replicas):
            assert token_range in ranks.ranges_by_rank(node)[rank]


def test_bad_rankings_are_refused_with_the_value() -> None:
    with pytest.raises(ReplicationArgumentError, match="needs a replica"):
        rank_ranges([AB], lambda r: ())
    with pytest.raises(ReplicationArgumentError, match="appears twice"):
        rank_ranges([AB], lambda r: (N1, N1))
    with pytest.raises(ReplicationArgumentError, match="host id"):
        RankedRange(AB, ("n1",))  # type: ignore[arg-type]
    with pytest.raises(ReplicationArgumentError, match="ranked twice"):
        RangeRanks((RankedRange(AB, (N1,)), RankedRange(AB, (N2,))))
    with pytest.raises(ReplicationArgumentError, match="not ranked"):
        seed_ranks().replicas(TokenRange(1, 2))
