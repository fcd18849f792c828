"""The Merkle tree core of anti-entropy repair (``ringflow.cluster._merkle`` and the sync plan).

Properties (issue 17): equal data gives equal roots whatever the insertion order; one changed
partition changes exactly its covering leaf and that leaf's ancestors; the depth rules
(``min(ceil(log2(partitions)), max depth)``, max depth from the memory budget and never above
20); the difference of two trees is exactly the leaf ranges that differ; folding a tree is the
tree built at the shallower depth; the sync plan leaves every replica with the union.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cluster import (
    MAX_TREE_DEPTH,
    MerkleTree,
    RepairOptions,
    TreeBuilder,
    canonical_partition,
    check_subrange,
    depth_for,
    difference,
    differing_leaves,
    leaf_ranges,
    max_depth_for_bytes,
    partition_digest,
    plan_partition_sync,
    plan_sync,
    ranges_to_repair,
    validation_digest,
)
from ringflow.errors import InvalidRequest
from ringflow.ring import (
    MAX_TOKEN,
    MIN_TOKEN,
    Host,
    TokenMetadata,
    TokenRange,
    replication_strategy,
)
from ringflow.schema import Cell, Mutation, Row, partition_token
from tests.unit.schema.test_reconcile_properties import mutations as reconcile_mutations

TOKENS = st.integers(MIN_TOKEN + 1, MAX_TOKEN)
RANGE = st.tuples(st.integers(MIN_TOKEN, MAX_TOKEN - 1), st.integers(1, 2**64)).map(
    lambda start_width: (start_width[0], min(MAX_TOKEN, start_width[0] + start_width[1]))
)


def _digest(value: int) -> bytes:
    return hashlib.md5(str(value).encode()).digest()


@st.composite
def partitions_in(draw: st.DrawFn, low: int, high: int) -> dict[int, bytes]:
    tokens = draw(st.lists(st.integers(low + 1, high), max_size=60, unique=True))
    return {token: _digest(draw(st.integers())) for token in tokens}


@st.composite
def tree_data(draw: st.DrawFn) -> tuple[int, int, int, dict[int, bytes]]:
    low, high = draw(RANGE)
    depth = draw(st.integers(0, 8))
    return low, high, depth, draw(partitions_in(low, high))


def _build(low: int, high: int, depth: int, data: dict[int, bytes], order: list[int]) -> MerkleTree:
    tree = MerkleTree.empty(low, high, depth)
    for token in order:
        tree.add(token, data[token])
    return tree


@given(tree_data(), st.randoms(use_true_random=False))
def test_equal_data_gives_equal_roots_in_any_order(
    case: tuple[int, int, int, dict[int, bytes]], rng: object
) -> None:
    low, high, depth, data = case
    order = list(data)
    shuffled = order[:]
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    first, second = _build(low, high, depth, data, order), _build(low, high, depth, data, shuffled)
    assert first.root() == second.root()
    assert first.leaves == second.leaves
    assert differing_leaves(first, second) == []


@given(tree_data(), st.data())
def test_one_changed_partition_changes_exactly_its_leaf_and_ancestors(
    case: tuple[int, int, int, dict[int, bytes]], data: st.DataObject
) -> None:
    low, high, depth, partitions = case
    token = data.draw(st.integers(low + 1, high))
    changed = dict(partitions)
    old = changed.get(token)
    changed[token] = _digest(data.draw(st.integers().filter(lambda v: _digest(v) != old)))
    before = _build(low, high, depth, partitions, list(partitions))
    after = _build(low, high, depth, changed, list(changed))
    leaf = before.leaf_of(token)
    assert differing_leaves(before, after) == [leaf]
    low_leaf, high_leaf = before.leaf_range(leaf)
    assert low_leaf < token <= high_leaf
    for level, (row_before, row_after) in enumerate(
        zip(before.levels(), after.levels(), strict=True)
    ):
        ancestor = leaf >> (depth - level)
        assert [i for i in range(len(row_before)) if row_before[i] != row_after[i]] == [ancestor]


@given(tree_data(), tree_data())
def test_difference_is_exactly_the_differing_leaf_ranges(
    first_case: tuple[int, int, int, dict[int, bytes]],
    second_case: tuple[int, int, int, dict[int, bytes]],
) -> None:
    low, high, depth, first_data = first_case
    second_data = {token: digest for token, digest in second_case[3].items() if low < token <= high}
    first = _build(low, high, depth, first_data, list(first_data))
    second = _build(low, high, depth, second_data, list(second_data))
    expected = [i for i in range(1 << depth) if first.leaves[i] != second.leaves[i]]
    assert differing_leaves(first, second) == expected
    ranges = difference(first, second)
    nonempty = [i for i in range(1 << depth) if first.boundary(i) < first.boundary(i + 1)]
    covered = [
        i
        for i in nonempty
        if any(lo <= first.boundary(i) and first.boundary(i + 1) <= hi for lo, hi in ranges)
    ]
    assert covered == [i for i in expected if i in nonempty]
    for token in set(first_data) | set(second_data):  # a partition differing is in a range
        if first_data.get(token) != second_data.get(token) and first.leaf_of(token) in expected:
            assert any(lo < token <= hi for lo, hi in ranges)
    for a, b in itertools.pairwise(ranges):
        assert a[1] < b[0]  # joined: never two touching ranges


@given(tree_data(), st.data())
def test_folding_equals_building_shallower(
    case: tuple[int, int, int, dict[int, bytes]], data: st.DataObject
) -> None:
    low, high, depth, partitions = case
    shallower = data.draw(st.integers(0, depth))
    deep = _build(low, high, depth, partitions, list(partitions))
    direct = _build(low, high, shallower, partitions, list(partitions))
    assert deep.folded(shallower).leaves == direct.leaves
    assert deep.folded(shallower).root() == direct.root()


@given(tree_data(), st.data())
def test_the_builder_gives_the_tree_built_at_its_depth_sparse_or_dense(
    case: tuple[int, int, int, dict[int, bytes]], data: st.DataObject
) -> None:
    """``TreeBuilder`` (what a replica's validation builds while it scans) gives, at any depth
    up to its max, exactly the tree built at that depth, whether it still holds its leaves
    sparse or switched to the whole array (past ``2**max_depth / 8`` leaves: up to 60
    partitions in a tree of at most 256 leaves crosses it)."""
    low, high, max_depth, partitions = case
    builder = TreeBuilder(low, high, max_depth)
    for token, digest in partitions.items():
        builder.add(token, digest)
    depth = data.draw(st.integers(0, max_depth))
    direct = _build(low, high, depth, partitions, list(partitions))
    given_tree = builder.tree(depth)
    assert (given_tree.depth, given_tree.leaves) == (depth, direct.leaves)
    assert given_tree.partitions == len(partitions)
    default = builder.tree()
    assert default.depth == depth_for(len(partitions), max_depth)
    assert default.leaves == _build(low, high, default.depth, partitions, list(partitions)).leaves


def test_the_builder_refuses_what_the_tree_refuses() -> None:
    builder = TreeBuilder(0, 1000, 4)
    with pytest.raises(InvalidRequest):
        builder.add(0, _digest(1))  # (low, high]: low is outside
    with pytest.raises(InvalidRequest):
        builder.tree(5)
    with pytest.raises(InvalidRequest):
        TreeBuilder(0, 1000, MAX_TREE_DEPTH + 1)


@given(tree_data())
def test_leaves_partition_the_range(case: tuple[int, int, int, dict[int, bytes]]) -> None:
    low, high, depth, partitions = case
    tree = MerkleTree.empty(low, high, depth)
    assert tree.boundary(0) == low and tree.boundary(1 << depth) == high
    for token in partitions:
        leaf = tree.leaf_of(token)
        assert tree.boundary(leaf) < token <= tree.boundary(leaf + 1)


@given(tree_data())
def test_wire_form_round_trips(case: tuple[int, int, int, dict[int, bytes]]) -> None:
    low, high, depth, partitions = case
    tree = _build(low, high, depth, partitions, list(partitions))
    again = MerkleTree.from_bytes(low, high, depth, tree.to_bytes(), tree.partitions)
    assert again.leaves == tree.leaves and again.partitions == len(partitions)


@given(st.integers(0, 2**40), st.integers(0, 40))
def test_depth_rule(partitions: int, max_depth: int) -> None:
    depth = depth_for(partitions, max_depth)
    expected = 0 if partitions <= 1 else min(math.ceil(math.log2(partitions)), max_depth)
    assert depth == expected
    assert depth <= max_depth


def test_depth_from_memory_budget() -> None:
    assert max_depth_for_bytes(0) == 0
    assert max_depth_for_bytes(32) == 0
    assert max_depth_for_bytes(32 << 10) == 10
    assert max_depth_for_bytes(1 << 40) == MAX_TREE_DEPTH  # never above 20
    assert depth_for(3_000_000, max_depth_for_bytes(1 << 40)) == 20


@settings(max_examples=50)
@given(
    st.lists(st.integers(0, 7), min_size=8, max_size=8),
    st.lists(st.sets(st.integers(-(2**20), 2**20), max_size=30), min_size=2, max_size=4),
)
def test_sync_plan_gives_every_replica_the_union(
    _unused: list[int], replica_tokens: list[set[int]]
) -> None:
    """Simulate the plan on sets of (token, version) partitions: after the streams, every
    replica holds the union, and no stream carries a leaf that already agreed everywhere."""
    low, high, depth = -(2**20) - 1, 2**20, 6
    holdings = {
        f"10.0.0.{i}": {(t, t % 3) for t in tokens} for i, tokens in enumerate(replica_tokens)
    }
    trees = {}
    for endpoint, held in holdings.items():
        tree = MerkleTree.empty(low, high, depth)
        for token, version in held:
            tree.add(token, _digest(token * 7 + version))
        trees[endpoint] = tree
    plan = plan_sync(trees)
    after = {endpoint: set(held) for endpoint, held in holdings.items()}
    for task in plan.tasks:
        moved = {p for p in holdings[task.source] if any(lo < p[0] <= hi for lo, hi in task.ranges)}
        after[task.target] |= moved
    union = set().union(*holdings.values())
    assert all(held == union for held in after.values())
    agreeing = [i for i in range(1 << depth) if len({t.leaves[i] for t in trees.values()}) == 1]
    for task in plan.tasks:
        for lo, hi in task.ranges:
            assert not any(lo < trees[task.source].boundary(i + 1) <= hi for i in agreeing)


def test_equal_trees_plan_nothing() -> None:
    tree = MerkleTree.empty(-100, 100, 3)
    tree.add(5, _digest(5))
    other = MerkleTree.from_bytes(-100, 100, 3, tree.to_bytes(), 1)
    plan = plan_sync({"a": tree, "b": other})
    assert plan.tasks == () and plan.leaves_mismatching == 0 and plan.leaves_compared == 8


def test_partition_digest_covers_timestamp_and_ttl() -> None:
    def partition(timestamp_us: int, ttl_s: int) -> Mutation:
        cell = (
            Cell.expiring(timestamp_us, ttl_s, 1_000_000, b"v")
            if ttl_s
            else Cell.live(timestamp_us, b"v")
        )
        return Mutation("ks", "t", (b"k",), rows=(Row((b"c",), cells={"v": cell}),))

    digests = {partition_digest(partition(ts, ttl)) for ts, ttl in [(1, 0), (2, 0), (1, 60)]}
    assert len(digests) == 3 and all(len(d) == 16 for d in digests)


def test_bad_input_is_invalid() -> None:
    with pytest.raises(InvalidRequest):
        MerkleTree.empty(5, 5, 2)
    with pytest.raises(InvalidRequest):
        MerkleTree.empty(0, 10, 21)
    with pytest.raises(InvalidRequest):
        MerkleTree.empty(0, 10, 2).leaf_of(11)
    with pytest.raises(InvalidRequest):
        check_subrange(0, None)
    with pytest.raises(InvalidRequest, match="Murmur3 token bounds"):
        check_subrange(0, 2**63)
    with pytest.raises(InvalidRequest, match="below"):
        RepairOptions("ks", start_token=10, end_token=10)


def test_ranges_to_repair_cover_the_ring_once_with_primary_ranges() -> None:
    hosts = [Host(uuid.UUID(int=i + 1), f"127.0.0.{i + 1}", "dc1", "r1") for i in range(3)]
    ring = TokenMetadata(
        {h: [MIN_TOKEN + 1 + 1000 * i + (2**62) * j for j in range(3)] for i, h in enumerate(hosts)}
    )
    strategy = replication_strategy({"class": "SimpleStrategy", "replication_factor": "3"})
    everything = ranges_to_repair(ring, strategy, hosts[0])
    covered = sum(piece.high - piece.low for piece in everything)
    assert covered == MAX_TOKEN - MIN_TOKEN  # RF 3 of 3: one node replicates the whole ring
    primary = [ranges_to_repair(ring, strategy, h, primary_range=True) for h in hosts]
    assert sum(p.high - p.low for pieces in primary for p in pieces) == MAX_TOKEN - MIN_TOKEN
    sub = ranges_to_repair(ring, strategy, hosts[0], subrange=TokenRange(-500, 500))
    assert sum(p.high - p.low for p in sub) == 1000
    assert all(-500 <= p.low < p.high <= 500 for p in sub)
    assert leaf_ranges(MerkleTree.empty(0, 8, 3), [1, 2, 5]) == [(1, 3), (5, 6)]


@given(reconcile_mutations())
def test_validation_digest_equals_the_canonical_digest(mutation: Mutation) -> None:
    """The fast path (no merge when nothing can shadow) gives the same digest as the canonical
    one on stored (canonical) partitions, and falls back to it whenever a deletion is present."""
    canonical = canonical_partition(mutation)
    stored = mutation if canonical is None else canonical
    assert validation_digest(stored) == partition_digest(mutation)


@settings(max_examples=50)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 30), st.integers(0, 2), max_size=20), min_size=2, max_size=4
    )
)
def test_partition_sync_sends_each_differing_partition_once_per_replica(
    replica_versions: list[dict[int, int]],
) -> None:
    """Row-level refinement: after the key streams every replica holds every key, in the
    newest version some source had (here: versions differ, so the test checks the union of
    (key, version) pairs reaches everyone), and a partition every replica holds alike moves
    nowhere."""
    holdings = {f"10.0.0.{i}": versions for i, versions in enumerate(replica_versions)}
    listings = {
        endpoint: [(k, (str(k).encode(),), _digest(k * 10 + v)) for k, v in versions.items()]
        for endpoint, versions in holdings.items()
    }
    tasks = plan_partition_sync(listings)
    after = {e: {(k, v) for k, v in versions.items()} for e, versions in holdings.items()}
    for task in tasks:
        keys = {int(key[0]) for key in task.keys}
        after[task.target] |= {(k, v) for k, v in holdings[task.source].items() if k in keys}
        assert all(int(key[0]) not in holdings[task.target] or
                   holdings[task.target][int(key[0])] != holdings[task.source][int(key[0])]
                   for key in task.keys)  # fmt: skip
    union = {(k, v) for versions in holdings.values() for k, v in versions.items()}
    assert all(held == union for held in after.values())
    agreed = {
        k for k in set().union(*holdings.values())
        if len({versions.get(k) for versions in holdings.values()}) == 1
    }  # fmt: skip
    assert not any(int(key[0]) in agreed for task in tasks for key in task.keys)


@settings(max_examples=30)
@given(
    st.lists(st.integers(-1000, 1000), min_size=1, max_size=40, unique=True),
    st.integers(0, 10),
    st.data(),
)
def test_one_changed_cell_changes_exactly_its_leaf(
    keys: list[int], depth: int, data: st.DataObject
) -> None:
    """Real partitions (``partition_token``, ``validation_digest``): changing one cell's value,
    timestamp or TTL in one partition changes exactly the leaf holding that partition's token."""

    def partition(key: int, cell: Cell) -> Mutation:
        pk = (key.to_bytes(4, "big", signed=True),)
        return Mutation("ks", "t", pk, rows=(Row((b"c",), cells={"v": cell}),))

    def tree_of(partitions: list[Mutation]) -> MerkleTree:
        tree = MerkleTree.empty(MIN_TOKEN, MAX_TOKEN, depth)
        for mutation in partitions:
            tree.add(partition_token("t", mutation.partition_key), validation_digest(mutation))
        return tree

    before = [partition(key, Cell.live(1000 + key, b"x")) for key in keys]
    index = data.draw(st.integers(0, len(keys) - 1))
    change = data.draw(st.sampled_from(["value", "timestamp", "ttl"]))
    old = before[index].rows[0].cells["v"]
    assert isinstance(old, Cell)
    new = {
        "value": Cell.live(old.timestamp_us, b"y"),
        "timestamp": Cell.live(old.timestamp_us + 1, old.value),
        "ttl": Cell.expiring(old.timestamp_us, 60, 1_000, old.value),
    }[change]
    after = list(before)
    after[index] = partition(keys[index], new)
    first, second = tree_of(before), tree_of(after)
    token = partition_token("t", before[index].partition_key)
    assert differing_leaves(first, second) == [first.leaf_of(token)]
