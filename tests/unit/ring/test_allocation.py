"""Token allocation (cassandra-core.md §4) and the ownership report.

Proves: random allocation is seeded, skips taken tokens and normalises MIN; the balanced
allocator keeps replicated ownership within the brief's 1.10 max/mean on 12 nodes x 16 vnodes
RF 3 (measured through the real NetworkTopologyStrategy, not the allocator's own model), beats
random, follows §4.2's rack rules, bumps tokens that clash with another DC; the report's ratios
are those of its rows.
"""

from __future__ import annotations

import random
import statistics
import uuid

import pytest

from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    RingError,
    TokenMetadata,
    allocate_balanced,
    allocate_random,
    grow_ring,
    ownership_report,
    random_token,
    replication_strategy,
)


class ScriptedRandom(random.Random):
    """A Random whose first ``getrandbits`` answers are scripted, then seeded randomness."""

    def __init__(self, script: list[int]) -> None:
        super().__init__(0)
        self.script = list(script)

    def getrandbits(self, k: int) -> int:
        return self.script.pop(0) if self.script else super().getrandbits(k)


def hosts_of(count: int, dc: str = "dc1", racks: int = 1, first: int = 1) -> list[Host]:
    return [
        Host(
            uuid.UUID(int=first + n), f"10.0.{first // 250}.{first % 250 + n}", dc, f"r{n % racks}"
        )
        for n in range(count)
    ]


def nts(**factors: int) -> dict[str, str]:
    return {"class": "NetworkTopologyStrategy", **{dc: str(f) for dc, f in factors.items()}}


def max_over_mean(metadata: TokenMetadata, options: dict[str, str], dc: str = "dc1") -> float:
    report = ownership_report(metadata, replication_strategy(options))
    return report.summary_of(dc).max_over_mean


# -- random ------------------------------------------------------------------------------------


def test_random_token_normalises_the_minimum() -> None:
    assert random_token(ScriptedRandom([0])) == MAX_TOKEN
    assert random_token(ScriptedRandom([1])) == MIN_TOKEN + 1
    assert random_token(ScriptedRandom([2**64 - 1])) == MAX_TOKEN


def test_random_allocation_skips_taken_and_repeated_tokens() -> None:
    taken = 5
    metadata = TokenMetadata({hosts_of(1)[0]: [taken]})
    script = [taken - MIN_TOKEN, taken - MIN_TOKEN, 7 - MIN_TOKEN, 7 - MIN_TOKEN, 9 - MIN_TOKEN]
    assert allocate_random(metadata, 2, ScriptedRandom(script)) == [7, 9]


def test_random_allocation_is_reproducible_from_the_seed() -> None:
    first = allocate_random(TokenMetadata(), 16, random.Random(4))
    assert first == allocate_random(TokenMetadata(), 16, random.Random(4))
    assert first != allocate_random(TokenMetadata(), 16, random.Random(5))
    assert len(set(first)) == 16


@pytest.mark.parametrize("bad", [0, -1, 16385, "16", True])
def test_token_counts_are_validated(bad: object) -> None:
    with pytest.raises(RingError, match="num_tokens"):
        allocate_random(TokenMetadata(), bad, random.Random(0))  # type: ignore[arg-type]
    with pytest.raises(RingError, match="num_tokens"):
        allocate_balanced(TokenMetadata(), hosts_of(1)[0], bad, 3, random.Random(0))  # type: ignore[arg-type]


# -- balanced ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_balanced_12_nodes_16_vnodes_rf3_is_within_ten_percent(seed: int) -> None:
    metadata = grow_ring(hosts_of(12), 16, random.Random(seed), replication_factor_by_dc={"dc1": 3})
    assert all(len(metadata.tokens_of(h)) == 16 for h in metadata.hosts)
    assert max_over_mean(metadata, nts(dc1=3)) <= 1.10


def test_balanced_beats_random() -> None:
    balanced, random_ratios = [], []
    for seed in range(4):
        hosts = hosts_of(12)
        rng = random.Random(seed)
        balanced.append(max_over_mean(grow_ring(hosts, 16, rng), nts(dc1=3)))
        rng = random.Random(seed)
        random_ratios.append(
            max_over_mean(grow_ring(hosts, 16, rng, allocator="random"), nts(dc1=3))
        )
    assert statistics.mean(balanced) < statistics.mean(random_ratios) - 0.05


@pytest.mark.parametrize(
    ("racks", "factor", "bound"),
    [(3, 3, 1.05), (4, 3, 1.12), (1, 1, 1.05), (1, 2, 1.12), (5, 3, 1.15)],
)
def test_balanced_with_racks(racks: int, factor: int, bound: float) -> None:
    metadata = grow_ring(
        hosts_of(12, racks=racks),
        16,
        random.Random(6),
        replication_factor_by_dc={"dc1": factor},
        planned_rack_count_by_dc={"dc1": racks},
    )
    assert max_over_mean(metadata, nts(dc1=factor)) <= bound


def test_balanced_two_dcs_each_balanced() -> None:
    hosts = [
        h
        for pair in zip(hosts_of(6, "dc1"), hosts_of(6, "dc2", first=100), strict=True)
        for h in pair
    ]
    metadata = grow_ring(hosts, 16, random.Random(3), replication_factor_by_dc={"dc1": 3, "dc2": 3})
    report = ownership_report(metadata, replication_strategy(nts(dc1=3, dc2=3)))
    for dc in ("dc1", "dc2"):
        assert report.summary_of(dc).max_over_mean <= 1.10


def test_balanced_is_reproducible_and_avoids_taken_tokens() -> None:
    hosts = hosts_of(8)
    first = grow_ring(hosts, 8, random.Random(42))
    again = grow_ring(hosts, 8, random.Random(42))
    assert first.sorted_tokens == again.sorted_tokens
    assert len(first.sorted_tokens) == 64
    assert MIN_TOKEN not in first.sorted_tokens


def test_fewer_racks_than_rf_is_refused_unless_more_are_planned() -> None:
    r0, r1 = hosts_of(2, racks=2)
    metadata = TokenMetadata({r0: allocate_random(TokenMetadata(), 4, random.Random(0))})
    with pytest.raises(RingError, match=r"number of racks \(2\) .* lower than its replication"):
        allocate_balanced(metadata, r1, 4, 3, random.Random(0))
    tokens = allocate_balanced(metadata, r1, 4, 3, random.Random(0), planned_rack_count=3)
    assert len(set(tokens) - set(metadata.sorted_tokens)) == 4
    with pytest.raises(RingError, match="planned_rack_count 1 is below the 2 racks"):
        allocate_balanced(metadata, r1, 4, 3, random.Random(0), planned_rack_count=1)


def test_balanced_refuses_a_host_already_on_the_ring_and_a_bad_rf() -> None:
    host = hosts_of(1)[0]
    metadata = TokenMetadata({host: [1]})
    with pytest.raises(RingError, match="already on the ring"):
        allocate_balanced(metadata, host, 4, 3, random.Random(0))
    with pytest.raises(RingError, match="replication_factor must be an int >= 1"):
        allocate_balanced(metadata, hosts_of(1, first=9)[0], 4, 0, random.Random(0))
    with pytest.raises(RingError, match="unknown allocator 'fancy'"):
        grow_ring(hosts_of(1, first=9), 4, random.Random(0), allocator="fancy")  # type: ignore[arg-type]


def test_a_midpoint_taken_by_another_dc_is_bumped() -> None:
    x, y, z = hosts_of(3, "dc2", first=20)
    blocker = hosts_of(1, "dc1")[0]
    quarter = 2**62
    # dc2's range midpoints are -2**61, 2**61 and MIN_TOKEN; dc1 holds the first two.
    metadata = TokenMetadata({x: [-quarter], y: [0], z: [quarter], blocker: [-(2**61), 2**61]})
    newcomer = hosts_of(1, "dc2", first=40)[0]
    (token,) = allocate_balanced(metadata, newcomer, 1, 3, random.Random(0))
    assert token in {-(2**61) + 1, 2**61 + 1, MIN_TOKEN + 1}


# -- the ownership report ----------------------------------------------------------------------


def test_report_of_an_uneven_two_node_ring() -> None:
    a, b = hosts_of(2)
    metadata = TokenMetadata({a: [0], b: [2**62]})
    report = ownership_report(
        metadata, replication_strategy({"class": "SimpleStrategy", "replication_factor": "1"})
    )
    assert [(row.host, row.token_count, row.effective_ownership) for row in report.rows] == [
        (a, 1, 0.75),
        (b, 1, 0.25),
    ]
    summary = report.overall
    assert (summary.mean_ownership, summary.max_over_mean, summary.min_over_mean) == (0.5, 1.5, 0.5)
    assert summary.stddev_over_mean == pytest.approx(0.5)
    assert [row.primary_ownership for row in report.rows] == [0.75, 0.25]
    rf2 = ownership_report(
        metadata, replication_strategy({"class": "SimpleStrategy", "replication_factor": "2"})
    )
    assert [row.effective_ownership for row in rf2.rows] == [1.0, 1.0]
    assert [row.primary_ownership for row in rf2.rows] == [0.75, 0.25]


def test_report_ratios_are_those_of_its_rows() -> None:
    metadata = grow_ring(hosts_of(7), 4, random.Random(1), allocator="random")
    report = ownership_report(metadata, replication_strategy(nts(dc1=3)))
    values = [row.effective_ownership for row in report.rows]
    mean = statistics.mean(values)
    assert sum(values) == pytest.approx(3.0)
    summary = report.summary_of("dc1")
    assert summary.max_over_mean == pytest.approx(max(values) / mean)
    assert summary.min_over_mean == pytest.approx(min(values) / mean)
    assert summary.stddev_over_mean == pytest.approx(statistics.pstdev(values) / mean)
    assert summary.host_count == 7
