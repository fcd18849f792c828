"""Token metadata (cassandra-core.md §1.2): the sorted ring, primary owners, ranges of a host.

Proves: the primary owner follows Cassandra's firstToken (exact match is the node's, past the end
wraps), agreeing with the driver's token map; the vectorised lookup equals the scalar one; each
token lies in exactly one host's ranges; bad rings are refused with RingError.
"""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest

from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host, RingError, TokenMetadata, TokenRange

from ._driver_oracle import DriverRing, probe_tokens, random_ring


def host(number: int, dc: str = "dc1", rack: str = "rack1") -> Host:
    return Host(uuid.UUID(int=number), f"127.0.0.{number}", dc, rack)


A, B, C = host(1), host(2), host(3)


def small_ring() -> TokenMetadata:
    return TokenMetadata({A: [-100, 200], B: [0], C: [100]})


def test_sorted_ring_and_owner_indices() -> None:
    ring = small_ring()
    assert ring.sorted_tokens == (-100, 0, 100, 200)
    assert ring.owner_indices.tolist() == [0, 1, 2, 0]
    assert ring.hosts == (A, B, C)
    assert ring.tokens_of(A) == (-100, 200)
    assert len(ring) == 4


@pytest.mark.parametrize(
    ("token", "owner"),
    [
        (-100, A),  # exact match belongs to that node
        (-99, B),
        (0, B),
        (1, C),
        (100, C),
        (150, A),
        (200, A),
        (201, A),  # past the largest ring token: wraps to ring[0]
        (MAX_TOKEN, A),
        (MIN_TOKEN, A),
        (-101, A),
    ],
)
def test_primary_owner_follows_first_token(token: int, owner: Host) -> None:
    assert small_ring().primary_owner(token) == owner


def test_ranges_of_a_host() -> None:
    ring = small_ring()
    assert ring.ranges_of(A) == [TokenRange(200, -100), TokenRange(100, 200)]
    assert ring.ranges_of(B) == [TokenRange(-100, 0)]
    single = TokenMetadata({A: [42]})
    assert single.ranges_of(A) == [TokenRange(42, 42)]
    assert single.ranges_of(A)[0].is_full_ring


def test_primary_owner_agrees_with_the_driver_on_random_rings() -> None:
    rng = random.Random(11)
    for _ in range(25):
        ring = random_ring(rng)
        metadata = ring.token_metadata()
        driver = DriverRing(ring.tokens_by_host)
        keyspace = driver.keyspace("SimpleStrategy", {"replication_factor": "1"})
        probes = probe_tokens(rng, metadata.sorted_tokens, count=40)
        owners = metadata.owners_of(np.array(probes, dtype=np.int64))
        for probe, owner_index in zip(probes, owners.tolist(), strict=True):
            expected = driver.replicas(keyspace, probe)
            assert [metadata.primary_owner(probe)] == expected
            assert metadata.hosts[owner_index] == expected[0]


def test_every_token_is_in_exactly_one_host_range() -> None:
    rng = random.Random(5)
    for _ in range(10):
        metadata = random_ring(rng).token_metadata()
        ranges = {h: metadata.ranges_of(h) for h in metadata.hosts}
        assert sum(len(r) for r in ranges.values()) == len(metadata)
        assert sum(r.size for rs in ranges.values() for r in rs) == pytest.approx(1.0)
        for probe in probe_tokens(rng, metadata.sorted_tokens, count=20):
            holders = [h for h, rs in ranges.items() if any(r.contains(probe) for r in rs)]
            assert holders == [metadata.primary_owner(probe)]


def test_vectorised_lookup_accepts_lists_and_refuses_out_of_range_tokens() -> None:
    ring = small_ring()
    assert ring.owners_of([-100, 0, 150, MAX_TOKEN]).tolist() == [0, 1, 0, 0]
    assert ring.first_token_indices(np.array([201], dtype=np.uint64)).tolist() == [0]
    assert ring.owners_of([]).tolist() == []
    with pytest.raises(RingError, match="outside the int64 range"):
        ring.owners_of(np.array([2**63], dtype=np.uint64))
    with pytest.raises(RingError, match="outside the int64 range"):
        ring.owners_of([2**64])
    with pytest.raises(RingError, match="integer array"):
        ring.owners_of([1.5])


def test_with_tokens_and_without_host_return_new_rings() -> None:
    ring = small_ring()
    D = host(4)
    grown = ring.with_tokens(D, [50])
    assert grown.primary_owner(50) == D
    assert ring.primary_owner(50) == C
    assert grown.without_host(D).sorted_tokens == ring.sorted_tokens


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TokenMetadata({A: [1, 2], B: [2]}), "token 2 is claimed by both"),
        (lambda: TokenMetadata({A: [1, 1]}), "lists a token twice"),
        (lambda: TokenMetadata({A: []}), "has no tokens"),
        (lambda: TokenMetadata({A: [2**63]}), "outside the int64 range"),
        (
            lambda: TokenMetadata({A: [1], Host(A.host_id, "127.0.0.9", "dc1", "r"): [2]}),
            "share the host_id",
        ),
        (
            lambda: TokenMetadata({A: [1], Host(uuid.uuid4(), A.endpoint, "dc1", "r"): [2]}),
            "share the endpoint",
        ),
        (lambda: TokenMetadata().primary_owner(0), "ring is empty"),
        (lambda: small_ring().tokens_of(host(9)), "not in the ring"),
        (lambda: Host("not-a-uuid", "e", "dc", "r"), "must be a uuid.UUID"),  # type: ignore[arg-type]
        (lambda: Host(uuid.uuid4(), "e", "", "r"), "dc must be a non-empty string"),
    ],
)
def test_bad_rings_are_refused(build: object, message: str) -> None:
    with pytest.raises(RingError, match=message):
        build()  # type: ignore[operator]


def reference_first_indices(ring: list[int], tokens: list[int]) -> list[int]:
    """Cassandra's firstToken, written plainly: the first ring token >= t, else index 0."""
    return [next((i for i, r in enumerate(ring) if r >= t), 0) for t in tokens]


@pytest.mark.parametrize(
    "layout",
    ["random", "crowded", "single", "edges"],
)
def test_vectorised_first_token_index_equals_the_definition(layout: str) -> None:
    rng = random.Random(layout)
    if layout == "random":
        tokens = list({rng.randint(MIN_TOKEN + 1, MAX_TOKEN) for _ in range(300)})
    elif layout == "crowded":  # one bucket holds them all: the searchsorted fallback
        tokens = rng.sample(range(-1000, 1000), 200)
    elif layout == "single":
        tokens = [rng.randint(MIN_TOKEN, MAX_TOKEN)]
    else:
        tokens = [MIN_TOKEN, MIN_TOKEN + 1, -1, 0, MAX_TOKEN - 1, MAX_TOKEN]
    metadata = TokenMetadata({host(1): tokens})
    ring = list(metadata.sorted_tokens)
    probes = [t + d for t in ring for d in (-1, 0, 1) if MIN_TOKEN <= t + d <= MAX_TOKEN]
    probes += [rng.randint(MIN_TOKEN, MAX_TOKEN) for _ in range(500)] + [MIN_TOKEN, MAX_TOKEN]
    expected = reference_first_indices(ring, probes)
    assert metadata.first_token_indices(np.array(probes, dtype=np.int64)).tolist() == expected
    assert [metadata.first_token_index(p) for p in probes] == expected
    grid = np.array(probes, dtype=np.int64).reshape(-1, 1)
    assert metadata.first_token_indices(grid).reshape(-1).tolist() == expected
